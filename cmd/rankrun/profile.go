package main

import (
	"errors"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfile writes profiles of the whole command for `go tool pprof`:
// a CPU profile to cpuPath (the RANKRUN_CPUPROFILE environment variable)
// and the allocations it made to memPath (RANKRUN_MEMPROFILE, written at
// the end; every allocation is sampled); "" profiles nothing.
// BENCHMARKS.md's profiles of the simulation runs were taken this way.
// The returned stop ends the profiles and closes their files.
func startProfile(cpuPath, memPath string) (stop func() error, err error) {
	var f *os.File
	if cpuPath != "" {
		if f, err = os.Create(cpuPath); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
	}
	if memPath != "" {
		runtime.MemProfileRate = 1
	}
	return func() error {
		var errs []error
		if f != nil {
			pprof.StopCPUProfile()
			errs = append(errs, f.Close())
		}
		if memPath != "" {
			runtime.GC() // the profile holds what the last collection saw
			m, err := os.Create(memPath)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(m, 0)
				errs = append(errs, m.Close())
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}, nil
}
