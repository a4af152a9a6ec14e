// Package mpienv is what a process learns of mpirun from outside the MPI
// library: whether mpirun started it, and as which rank (the variables it
// sets). The CLI, launch and the MPI backend share it; no user calls it
// (a program picks its backend through launch).
package mpienv

import (
	"errors"
	"fmt"
	"os"
	"strconv"
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
