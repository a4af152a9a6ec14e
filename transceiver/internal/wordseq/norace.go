//go:build !race

package wordseq

func raceRead([]uint64)  {}
func raceWrite([]uint64) {}

func raceRuns([]byte, int, int, int, bool) {}
