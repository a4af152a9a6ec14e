package mpi

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// LeaveLast keeps a rank that has nothing to say until the launcher ends
// the job, at most bound. mpirun ends a job as soon as its first process
// exits non-zero, killing the others with whatever they had not yet
// written: a rank other than world rank 0 that exits first with a refusal
// every rank shares (a world of the wrong size, a bad command line) kills
// world rank 0 before it prints it. So world rank 0 prints and exits, and
// the other ranks wait here for mpirun's SIGTERM (or SIGINT), however
// slow the host; past bound (a launcher that does not end the job) they
// leave anyway. It needs no MPI and returns at once when bound <= 0.
func LeaveLast(bound time.Duration) {
	if bound <= 0 {
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-sig:
	case <-t.C:
	}
}
