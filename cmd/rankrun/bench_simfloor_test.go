package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The floor row is the speed that fresh memory and three passes over the
// moved bytes allow: finite, positive, and no faster than the run's
// virtual time over the passes alone could make it.
func TestSimFloorRow(t *testing.T) {
	tm := simTiming{virtual: 2, rss: 8 << 20, moved: 32 << 20}
	row, err := simFloorRow("a run", tm, 1)
	require.NoError(t, err)
	require.Greater(t, row.Value, 0.0)
	require.Less(t, row.Value, 1e9, "a floor of no time")
	require.Equal(t, ">=100", row.Goal)
	require.True(t, strings.Contains(row.Note, "32 MiB of moved KV bytes"), row.Note)
	require.NotNil(t, row.Met)

	for _, bad := range []simTiming{{virtual: 2, moved: 1}, {virtual: 2, rss: 1}, {rss: 1, moved: 1}} {
		_, err := simFloorRow("a run", bad, 1)
		require.Error(t, err, "%+v", bad)
	}
}
