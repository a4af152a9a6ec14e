package main

import (
	"os"
	"runtime/pprof"
)

// startProfile writes a CPU profile of the whole command to path (the
// RANKRUN_CPUPROFILE environment variable; "" profiles nothing), for
// `go tool pprof`. BENCHMARKS.md's profiles of the simulation runs were
// taken this way. The returned stop ends the profile and closes the file.
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
