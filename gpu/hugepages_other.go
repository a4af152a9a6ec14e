//go:build unix && !linux && !race

package gpu

func adviseHuge([]byte) {}
