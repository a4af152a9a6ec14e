//go:build race

package wordseq

import (
	"runtime"
	"unsafe"
)

// The race detector does not see assembly's memory accesses: report the
// vector loops' reads and writes to it, so that a KV block read while
// another rank writes it is caught as it is on the Go path.
func raceRead(p []uint64) { runtime.RaceReadRange(unsafe.Pointer(&p[0]), len(p)*8) }

func raceWrite(p []uint64) { runtime.RaceWriteRange(unsafe.Pointer(&p[0]), len(p)*8) }

// raceRuns reports the runs of n bytes, stride apart, that a grid loop
// reads (or writes).
func raceRuns(buf []byte, stride, runs, n int, write bool) {
	for r := range runs {
		p := unsafe.Pointer(&buf[r*stride])
		if write {
			runtime.RaceWriteRange(p, n)
		} else {
			runtime.RaceReadRange(p, n)
		}
	}
}
