package executor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/topology"
)

// A member that waited past the peer bound for its group's leader (the
// idle tick, the wakes drained at the end) names the leader by its world
// rank as well as its group rank, and itself likewise: on a sub-communicator
// group ranks alone do not say which process to look at (a frozen
// GEN leader under mpirun was named "ranks [0]" of "world/s1c2/s0c0").
func TestPeerTimeoutNamesWorldRanks(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got error
	errs := local.RunAll(ctx, 4, local.Config{}, func(ctx context.Context, world comm.Comm) error {
		gen := 0
		if world.Rank() >= 1 {
			gen = 1
		}
		inst, err := world.Split(ctx, gen, world.Rank())
		if err != nil {
			return err
		}
		defer inst.Close()
		if world.Rank() == 3 {
			l := &loop{g: groups{role: topology.Generation, rank: inst.Rank(), inst: inst, exec: inst}, clk: clock.Real(), peerBound: time.Second}
			got = l.peerTimeout(0, "the leader's idle tick", l.clk.Now())
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "world rank %d", r)
	}
	require.ErrorIs(t, got, comm.ErrCollectiveTimeout)
	for _, want := range []string{"rank 2 (world rank 3) waited in Irecv", "at executor: the leader's idle tick",
		"ranks [0] never arrived (world ranks [1])", "gen rank 2 (world rank 3) waited"} {
		require.ErrorContains(t, got, want)
	}
}
