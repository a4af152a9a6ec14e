package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Seed 000's table in shape, in virtual time: with the replay every idle
// CTX iteration sleeps exactly one sender wait slice (1000 ms) where the
// fixed build sleeps none, the next request's KV reaches GEN later by what
// is left of that interval (more than nothing, at most one interval), and
// the benchmark loses throughput as the seed's did.
func TestSeed000Table(t *testing.T) {
	rows, err := seed000Table()
	require.NoError(t, err)
	require.Len(t, rows, 4)
	step, wait, dur, tput := rows[0], rows[1], rows[2], rows[3]
	assert.Zero(t, step.good, "no idle step sleeps in the fixed build")
	assert.Equal(t, 1000.0, step.bad, "the replay's idle step is the slice, exactly")
	assert.Greater(t, wait.bad-wait.good, 0.0, "the handover waits for the CTX's sleep")
	assert.LessOrEqual(t, wait.bad-wait.good, 1000.0, "at most one interval per handover")
	assert.InDelta(t, (wait.bad-wait.good)/1e3, dur.bad-dur.good, 1e-9, "the duration grows by the one delayed handover, exactly")
	assert.Less(t, tput.change, -10.0, "a loss of the seed's order (-27.7 percent)")
	assert.Contains(t, tput.why, fmt.Sprintf("ends %.2f s into a sleep", 1-(wait.bad-wait.good)/1e3), "the note's figure is the run's")
	for _, r := range rows {
		t.Logf("%-50s seed %8.2f -> %8.2f   run %8.2f -> %8.2f %s (change %.1f%% vs seed's %.1f%%)", r.what, r.seedGood, r.seedBad, r.good, r.bad, r.unit, r.change, r.seedChange)
	}
}
