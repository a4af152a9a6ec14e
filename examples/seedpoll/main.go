// Command seedpoll is the pattern of this project's seed 000, written as a
// user would: every iteration a rank polls its own transfers for a bounded
// time (rank-local: ranks hold different numbers of them) and then all
// ranks agree on what completed (a collective every rank enters). The bug
// of the seed: a poll that waits for one completion when the rank holds no
// transfer can only end at its deadline, so every idle iteration sleeps the
// whole interval. The fix clamps the target to the transfers held. The
// test finds the bug with the schedule explorer and passes with the clamp.
//
//	go run ./examples/seedpoll [-unclamped]
//	go build -tags mpi -o seedpoll ./examples/seedpoll && mpirun -np 4 ./seedpoll
//	go test ./examples/seedpoll
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/launch"
)

func main() {
	unclamped := flag.Bool("unclamped", false, "poll without the clamp (the seed's bug)")
	flag.Parse()
	os.Exit(launch.Main(launch.Options{Ranks: 4}, func(ctx context.Context, c comm.Comm) error {
		agreed, err := program(ctx, c, 12, !*unclamped)
		if err == nil && c.Rank() == 0 {
			fmt.Printf("seedpoll over %d ranks: %d transfers agreed complete in 12 iterations; no idle poll slept out its interval\n", c.Size(), agreed)
		}
		return err
	}))
}

// interval bounds one poll (the seed's kv_transfer_sender_future_timeout_ms
// was 1000 ms).
const interval = 100 * time.Millisecond

// has says whether rank r has a transfer in iteration it: rank-local work,
// different on every rank.
func has(r, it int) bool { return (r+it)%3 != 0 }

// program runs iters iterations and returns how many transfers the ranks
// agreed were complete. It fails when a poll of a rank that held no
// transfer waited its whole interval (seed 000's symptom).
func program(ctx context.Context, c comm.Comm, iters int, clamp bool) (int64, error) {
	n, r := c.Size(), c.Rank()
	clk := comm.PropsOf(c).Clock
	right, left := (r+1)%n, (r+n-1)%n
	var agreed int64
	buf := make([]byte, 8)
	for it := range iters {
		// Rank-local work: my transfer (from the left neighbour, after
		// its 1 ms of compute), if I have one this iteration.
		var pending []comm.Request
		if has(r, it) {
			q, err := c.Irecv(buf, left, it)
			if err != nil {
				return 0, err
			}
			pending = append(pending, q)
		}
		var sends []comm.Request
		if has(right, it) {
			if err := clock.Sleep(ctx, clk, time.Millisecond); err != nil {
				return 0, err
			}
			q, err := c.Isend(buf, right, it)
			if err != nil {
				return 0, err
			}
			sends = append(sends, q)
		}
		// Phase 1, rank-local: a bounded poll for my transfers.
		target := 1
		if clamp {
			target = min(target, len(pending))
		}
		done, waited, err := poll(ctx, clk, pending, target, interval)
		if err != nil {
			return 0, err
		}
		if len(pending) == 0 && waited >= interval {
			return 0, fmt.Errorf("iteration %d: a poll with no transfer held slept out its whole %v interval (seed 000)", it, interval)
		}
		// Phase 2, entered by every rank: agree on what completed.
		sum := make([]int64, 1)
		if err := comm.Allreduce(ctx, c, comm.Sum, []int64{int64(done)}, sum); err != nil {
			return 0, err
		}
		agreed += sum[0]
		for _, q := range append(pending, sends...) {
			if _, err := q.Wait(ctx); err != nil {
				return 0, err
			}
		}
	}
	return agreed, nil
}

// poll waits until target of pending have completed or d has passed, and
// returns how many completed and how long it waited.
func poll(ctx context.Context, clk clock.Clock, pending []comm.Request, target int, d time.Duration) (int, time.Duration, error) {
	start := clk.Now()
	deadline := start.Add(d)
	for {
		done := 0
		for _, q := range pending {
			if _, ok, err := q.Test(); ok {
				if err != nil {
					return 0, 0, err
				}
				done++
			}
		}
		now := clk.Now()
		if done >= target || !now.Before(deadline) {
			return done, now.Sub(start), nil
		}
		if err := clock.Sleep(ctx, clk, min(deadline.Sub(now), time.Millisecond)); err != nil {
			return 0, 0, err
		}
	}
}
