// Package mpienv is what a process learns of mpirun from outside the MPI
// library: whether mpirun started it, and as which rank (the variables it
// sets), and how long to pause between polls of a backend that has no
// completion events. The CLI, launch and the MPI backend share it; no
// user calls it (a program picks its backend through launch).
package mpienv

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// ErrUnderMPI: a binary built without MPI support was started by mpirun
// (comm/mpi exports it as mpi.ErrUnderMPI).
var ErrUnderMPI = errors.New("comm: started under mpirun without MPI support")

// Launch describes how the process was started, read from the variables
// mpirun sets (OMPI_COMM_WORLD_* and PMIX_RANK).
type Launch struct {
	UnderMPI  bool
	WorldRank int // -1 when unknown
	WorldSize int // -1 when unknown
	LocalRank int // -1 when unknown
}

// Detect reads the launcher's environment.
func Detect() Launch { return detect(os.Getenv) }

func detect(getenv func(string) string) Launch {
	l := Launch{WorldRank: -1, WorldSize: -1, LocalRank: -1}
	num := func(name string) int {
		v, err := strconv.Atoi(getenv(name))
		if err != nil {
			return -1
		}
		return v
	}
	for _, name := range []string{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"} {
		if getenv(name) != "" {
			l.UnderMPI = true
		}
	}
	l.WorldRank = num("OMPI_COMM_WORLD_RANK")
	if l.WorldRank < 0 {
		l.WorldRank = num("PMIX_RANK")
	}
	l.WorldSize = num("OMPI_COMM_WORLD_SIZE")
	l.LocalRank = num("OMPI_COMM_WORLD_LOCAL_RANK")
	return l
}

// RefuseUnderMPI returns an error wrapping ErrUnderMPI when the process was
// started by mpirun: a binary without the MPI backend must not run as N
// silent copies of rank 0.
func (l Launch) RefuseUnderMPI(binary string) error {
	if !l.UnderMPI {
		return nil
	}
	return fmt.Errorf("%w: %s was started by mpirun (rank %d of %d) but was built without MPI; "+
		"rebuild with `go build -tags mpi` (make build-mpi) or run it without mpirun to use in-process ranks",
		ErrUnderMPI, binary, l.WorldRank, l.WorldSize)
}

// PollPause sleeps about d (capped at 1 ms) between polls of a backend that
// has no completion events (MPI). A Go timer shorter than a millisecond
// sleeps a whole millisecond when the process is otherwise idle (the
// runtime's poller waits in milliseconds: 50 us timers took 1.08 ms here),
// which would put a millisecond of latency on every idle wake-up; the
// kernel's nanosleep keeps it near d (124 us for 50 us here).
func PollPause(d time.Duration) {
	d = min(max(d, 0), time.Millisecond)
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil)
}
