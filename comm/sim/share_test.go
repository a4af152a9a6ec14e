package sim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/sim"
)

// In groups large enough that the simulator shares one gathered result
// among the ranks that only read it (checked mode's stamp exchange), a
// caller's own result is still its own: a rank that writes into what it
// gathered changes nothing another rank reads, checked or not; every rank
// gathers every contribution; and ranks that enter different collectives
// are still named (ErrDesync) on every rank.
func TestLargeGroupAllgatherResultsAreEachRanksOwn(t *testing.T) {
	for _, n := range []int{63, 64, 130} {
		for _, checked := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/checked=%v", n, checked), func(t *testing.T) {
				res := sim.Run(context.Background(), n, sim.Config{Seed: 3, Checked: checked}, func(ctx context.Context, c comm.Comm, _ clock.Clock) error {
					var out comm.Gathered
					if err := c.AllgatherInt64s(ctx, []int64{int64(c.Rank()), int64(2 * c.Rank())}, &out); err != nil {
						return err
					}
					if c.Rank() == 0 {
						out.Flat[3] = 999 // rank 1's second value, in rank 0's result
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					for r := range n {
						if c.Rank() == 0 && r == 1 {
							continue
						}
						if got := out.Of(r); len(got) != 2 || got[0] != int64(r) || got[1] != int64(2*r) {
							return fmt.Errorf("rank %d reads rank %d's contribution as %v", c.Rank(), r, got)
						}
					}
					return nil
				})
				require.NoError(t, errors.Join(res.Errs...))
			})
		}
	}
	// A desync over 130 checked ranks: the last rank enters a barrier
	// where the others gather.
	res := sim.Run(context.Background(), 130, sim.Config{Seed: 3, Checked: true}, func(ctx context.Context, c comm.Comm, _ clock.Clock) error {
		if c.Rank() == c.Size()-1 {
			return c.Barrier(ctx)
		}
		var out comm.Gathered
		return c.AllgatherInt64s(ctx, []int64{1}, &out)
	})
	for r, err := range res.Errs {
		require.ErrorIs(t, err, comm.ErrDesync, "rank %d", r)
	}
}
