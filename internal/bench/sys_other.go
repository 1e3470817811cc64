//go:build !linux

package bench

func peakRSS() uint64    { return 0 }
func resetPeakRSS() bool { return false }
func cpuModel() string   { return "" }
