// Package objstoretest is the test kit for code built on objstore: fresh
// stores for tests (MemURL, FileURL, Open), a fault-injecting wrapper
// (Fault) and the conformance suite every Bucket implementation must pass
// (RunConformance, RunConformanceURL). It is imported only by tests.
package objstoretest
