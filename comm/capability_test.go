package comm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/comm/sim"
)

// Every capability comm looks for (comm/capability.go) is found on the
// in-process and the simulated backend, under checked mode: comm finds
// them by method set, and a backend whose method drifted from the one
// comm asks for would lose the capability without a build error. (The MPI
// backend's are checked under mpirun: comm/mpi's tests.)
func TestBackendCapabilities(t *testing.T) {
	check := func(t *testing.T, c comm.Comm, virtual bool) {
		raw := comm.PropsOf(c).Backend
		assert.True(t, comm.PropsOf(c).Checked, "checked mode")
		assert.Positive(t, comm.PropsOf(c).Timeout, "a collective bound")
		assert.Len(t, comm.PropsOf(c).WorldRanks, c.Size(), "world ranks")
		assert.NotNil(t, comm.PropsOf(c).Notify, "completion events")
		assert.Nil(t, comm.PropsOf(c).Progress, "bytes that move without help")
		_, ok := raw.(comm.InspectorForTest)
		assert.True(t, ok, "the stall inspector")
		_, ok = raw.(comm.CollectivesForTest)
		assert.True(t, ok, "typed collectives")
		_, ok = raw.(comm.MembersForTest)
		assert.True(t, ok, "members")
		_, ok = raw.(comm.BoundedForTest)
		assert.True(t, ok, "bounded")
		_, ok = raw.(comm.ClockedForTest)
		assert.Equal(t, virtual, ok, "a clock of its own")
		if !virtual {
			_, ok = raw.(comm.StampComparerForTest)
			assert.True(t, ok, "the stamp comparer")
			assert.NotNil(t, comm.PropsOf(c).Lender, "lent bytes")
		}
		assert.NotNil(t, comm.PropsOf(c).Vectored, "vectored I/O")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("local", func(t *testing.T) {
		err := local.Run(ctx, 2, local.Config{Checked: true}, func(ctx context.Context, c comm.Comm) error {
			check(t, c, false)
			return nil
		})
		assert.NoError(t, err)
	})
	t.Run("sim", func(t *testing.T) {
		res := sim.Run(ctx, 2, sim.Config{Seed: 1, Checked: true}, func(ctx context.Context, c comm.Comm, _ clock.Clock) error {
			check(t, c, true)
			return nil
		})
		assert.NoError(t, res.Err())
	})
}
