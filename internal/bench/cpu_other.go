//go:build !unix

package bench

func cpuTime() float64 { return 0 }
