//go:build unix

package main

import (
	"os"
	"syscall"
)

// childPeakRSS is a finished child process's peak RSS in bytes (0: unknown).
func childPeakRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return int64(ru.Maxrss) << 10 // KiB on Linux
	}
	return 0
}
