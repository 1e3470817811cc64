// Package stepmemo lets the runtime hand a step the run's memory without
// an exported field on steprunner.Step: steprunner sets Set in its init,
// and the runtime calls it on each Step it builds.
package stepmemo

// Set stores memo, the run's memory as it committed before the step
// started, in step (a *steprunner.Step). steprunner's init sets it; memo
// is read-only from then on.
var Set func(step any, memo map[string][]byte)
