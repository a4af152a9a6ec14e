package explore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/explore"
)

// Each oracle of SearchProgram on a program that breaks it: the failure
// names what broke and on which rank, and a correct program passes.
func TestSearchProgramOracles(t *testing.T) {
	ctx := context.Background()
	stop := make(chan struct{}) // ends the goroutine one case leaves running
	defer close(stop)
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, c comm.Comm) error
		want []string
	}{
		{"a rank-local branch picks another collective", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 2 {
				return c.Barrier(ctx)
			}
			return comm.Allreduce(ctx, c, comm.Sum, []float32{1}, make([]float32, 1))
		}, []string{"comm: collective desync", "Barrier", "Allreduce"}},
		{"a rank returns without entering", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 0 {
				return nil
			}
			return c.Barrier(ctx)
		}, []string{"sim: deadlock", "rank 0 returned", "Barrier #1 on world"}},
		{"a receive nobody sends", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 1 {
				if _, err := c.Irecv(make([]byte, 4), 0, 9); err != nil {
					return err
				}
			}
			return nil
		}, []string{"left behind: rank 1: receive from 0 tag 9 on world, not complete when the rank returned"}},
		{"a send never waited", func(ctx context.Context, c comm.Comm) error {
			switch c.Rank() {
			case 0:
				_, err := c.Isend([]byte("x"), 1, 3)
				return err
			case 1:
				q, err := c.Irecv(make([]byte, 1), 0, 3)
				if err != nil {
					return err
				}
				_, err = q.Wait(ctx)
				return err
			}
			return nil
		}, []string{"left behind: rank 0: send to 1 tag 3 on world"}},
		{"a panic in a rank", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 1 {
				var m map[string]int
				m["x"] = 1
			}
			return c.Barrier(ctx)
		}, []string{"rank 1: panic: assignment to entry in nil map"}},
		{"the program's own assertion", func(ctx context.Context, c comm.Comm) error {
			out := make([]int64, 1)
			if err := comm.Allreduce(ctx, c, comm.Sum, []int64{1}, out); err != nil {
				return err
			}
			if out[0] != 4 {
				return errors.New("sum is not 4")
			}
			return nil
		}, []string{"rank 0: sum is not 4"}},
		{"a goroutine left running", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 0 {
				go func() { <-stop }()
			}
			return nil
		}, []string{"goroutines the ranks started are still running"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := explore.SearchProgram(ctx, 3, tc.fn, explore.ProgramOptions{Seeds: 20})
			require.NotNil(t, res.First, "no schedule failed")
			msg := res.First.Error()
			for _, w := range tc.want {
				require.Contains(t, msg, w)
			}
		})
	}
	ok := explore.SearchProgram(ctx, 3, func(ctx context.Context, c comm.Comm) error {
		out := make([]float64, 2)
		if err := comm.Allreduce(ctx, c, comm.Sum, []float64{1, 2}, out); err != nil {
			return err
		}
		if out[0] != 3 || out[1] != 6 {
			return errors.New("wrong sum")
		}
		return c.Barrier(ctx)
	}, explore.ProgramOptions{Seeds: 20})
	require.Nil(t, ok.First)
	require.Equal(t, 20, ok.Schedules)
}

// A bug that needs one particular interleaving is found, and the failure
// shrinks to the fewest ranks that show it; the replay line names the
// schedule, and running that one schedule fails again.
func TestSearchProgramFindsAScheduleBugAndShrinks(t *testing.T) {
	// Rank 0 answers the first message to arrive; whether a rank-local
	// "go" or "stop" reply came first decides (on rank 0 only) whether it
	// enters a barrier: a schedule-dependent desync.
	racy := func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 0 {
			buf := make([]byte, 1)
			first := byte(0)
			for range c.Size() - 1 {
				q, err := c.Irecv(buf, comm.AnySource, 1)
				if err != nil {
					return err
				}
				st, err := q.Wait(ctx)
				if err != nil {
					return err
				}
				if first == 0 {
					first = byte(st.Source)
				}
			}
			if first == 1 {
				return c.Barrier(ctx)
			}
			return comm.Allreduce(ctx, c, comm.Max, []int64{0}, make([]int64, 1))
		}
		q, err := c.Isend([]byte{1}, 0, 1)
		if err != nil {
			return err
		}
		if _, err := q.Wait(ctx); err != nil {
			return err
		}
		return comm.Allreduce(ctx, c, comm.Max, []int64{0}, make([]int64, 1))
	}
	res := explore.SearchProgram(context.Background(), 4, racy, explore.ProgramOptions{Seeds: 200, MinRanks: 2})
	require.NotNil(t, res.First, "the interleaving was never tried")
	require.Contains(t, res.First.Error(), "collective desync")
	require.Equal(t, 2, res.Smallest.Ranks, "the bug shows on 2 ranks")
	// The same schedule again fails the same way.
	again := explore.SearchProgram(context.Background(), res.Smallest.Ranks, racy,
		explore.ProgramOptions{Seeds: 1, Start: res.Smallest.Seed, Strategy: &res.Smallest.Strategy})
	require.NotNil(t, again.First)
	require.Equal(t, res.Smallest.Why, again.First.Why)
}
