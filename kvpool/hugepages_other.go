//go:build unix && !linux && !race

package kvpool

func adviseHuge([]byte) {}
