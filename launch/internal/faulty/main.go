// Command faulty is a user's program with one fault planted on one rank,
// for scripts/test-examples.sh: under mpirun the failure must come back
// named, once, and end the job. FAULT picks the fault (panic: the rank
// panics; unmatched: it waits on a receive no peer ever matches; early: it
// returns at once, without the barrier its peers wait in; swallowed: the
// others return at once, and it drops the error of the barrier no peer
// joined), and
// FAULT_RANK the rank; the other ranks work for a while first (lest their
// own collective bound fire before the faulty rank's failure ends the
// job), then meet in a barrier.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/launch"
)

func main() {
	fault := os.Getenv("FAULT")
	rank, err := strconv.Atoi(os.Getenv("FAULT_RANK"))
	if err != nil && fault != "" {
		fmt.Fprintf(os.Stderr, "faulty: FAULT_RANK=%q: want a rank\n", os.Getenv("FAULT_RANK"))
		os.Exit(2)
	}
	bound := 2 * time.Second
	if fault == "early" {
		// The peers of a rank that returned fail at once, naming it: no
		// bound of theirs runs out (the returning rank says so before it
		// finalizes), so an hour's bound must not delay the verdict.
		bound = time.Hour
	}
	os.Exit(launch.Main(launch.Options{Timeout: bound}, func(ctx context.Context, c comm.Comm) error {
		if fault == "swallowed" && c.Rank() != rank {
			return nil // the others return at once: the faulty rank's barrier never completes
		}
		if c.Rank() != rank || fault == "" {
			if fault != "early" {
				time.Sleep(10 * time.Second) // the others' work: the faulty rank's failure ends the job first
			}
			return c.Barrier(ctx)
		}
		switch fault {
		case "panic":
			panic(fmt.Sprintf("boom on rank %d", rank))
		case "early":
			return nil // returns without the barrier its peers wait in
		case "swallowed":
			// A barrier no peer joins times out; the program drops the
			// error and returns as if all went well.
			if err := c.Barrier(ctx); err == nil {
				return errors.New("faulty: a barrier no peer joined completed")
			}
			return nil
		case "unmatched":
			q, err := c.Irecv(make([]byte, 8), (rank+1)%c.Size(), 99)
			if err != nil {
				return err
			}
			_, err = q.Wait(ctx)
			return err
		}
		return fmt.Errorf("faulty: FAULT=%q: want panic, unmatched, early or swallowed", fault)
	}))
}
