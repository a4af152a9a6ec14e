package benchtab

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The floor's speed is the run's virtual time over its memory's cost:
// first touch plus three passes.
func TestFloorSpeed(t *testing.T) {
	require.Equal(t, 10.0, floorSpeed(5, 0.2, 0.1))
	require.Equal(t, 100.0, floorSpeed(11.7, 0.057, 0.02))
	require.True(t, math.IsInf(floorSpeed(1, 0, 0), 1), "no cost: no bound")
}

// The floor row is measured, finite and positive, has no goal of its own
// (it bounds the run's row, it is not a figure to meet), and names what
// it measured; a run that reports no memory, bytes or time gives no row.
func TestSimFloorRow(t *testing.T) {
	tm := simTiming{virtual: 2, rss: 8 << 20, moved: 32 << 20}
	row, err := simFloorRow("a run", tm, 1)
	require.NoError(t, err)
	require.Greater(t, row.Value, 0.0)
	require.False(t, math.IsInf(row.Value, 0) || math.IsNaN(row.Value), "%v", row.Value)
	require.Empty(t, row.Goal)
	require.Nil(t, row.Met, "a bound is not met or missed")
	require.True(t, strings.Contains(row.Note, "32 MiB of moved KV bytes"), row.Note)

	for _, bad := range []simTiming{{virtual: 2, moved: 1}, {virtual: 2, rss: 1}, {rss: 1, moved: 1}} {
		_, err := simFloorRow("a run", bad, 1)
		require.Error(t, err, "%+v", bad)
	}
}
