package main

import (
	"fmt"
	"testing"

	"github.com/rankrun/rankrun/internal/seedtab"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Seed 000's table in shape, in virtual time: with the replay every idle
// CTX iteration sleeps exactly one sender wait slice (1000 ms) where the
// fixed build sleeps none, the next request's KV reaches GEN later by what
// is left of that interval (more than nothing, at most one interval), and
// the benchmark loses throughput as the seed's did.
func TestSeed000Table(t *testing.T) {
	withoutRace(t, "test-perf")
	rows, err := seedtab.Seed000Table()
	require.NoError(t, err)
	require.Len(t, rows, 4)
	step, wait, dur, tput := rows[0], rows[1], rows[2], rows[3]
	assert.Less(t, step.Good, 0.1, "no idle step sleeps in the fixed build (an idle iteration's collectives take microseconds)")
	assert.InDelta(t, 1000.0, step.Bad-step.Good, 1e-6, "the replay adds the slice to an idle step, exactly")
	assert.Greater(t, wait.Bad-wait.Good, 0.0, "the handover waits for the CTX's sleep")
	assert.LessOrEqual(t, wait.Bad-wait.Good, 1000.0, "at most one interval per handover")
	assert.InDelta(t, (wait.Bad-wait.Good)/1e3, dur.Bad-dur.Good, 1e-9, "the duration grows by the one delayed handover, exactly")
	assert.Less(t, tput.Change, -5.0, "a loss of the seed's order (-27.7 percent on a 2.46 s benchmark; this one takes 7 s without MTP)")
	assert.Contains(t, tput.Why, fmt.Sprintf("ends %.2f s into a sleep", 1-(wait.Bad-wait.Good)/1e3), "the note's figure is the run's")
	for _, r := range rows {
		t.Logf("%-50s seed %8.2f -> %8.2f   run %10.6f -> %10.6f %s (change %.1f%% vs seed's %.1f%%)", r.What, r.SeedGood, r.SeedBad, r.Good, r.Bad, r.Unit, r.Change, r.SeedChange)
	}
}

// The #15139 shape costs throughput in proportion to what its blocking
// wait waits for: on seed 001's shape, where a handover over NVLink is
// short against a prefill, almost nothing; where the KV crosses a NIC in
// about a prefill's time, a quarter or more. The figures are virtual
// time: exact.
func TestBlocking15139Cost(t *testing.T) {
	withoutRace(t, "test-perf")
	costs, err := seedtab.Blocking15139()
	require.NoError(t, err)
	require.Len(t, costs, 2)
	for _, c := range costs {
		t.Logf("%s: %.3f -> %.3f requests/s (%.3fx), TTFT p50 %.2f -> %.2f ms, longest poll %.3f -> %.3f ms",
			c.Job.Name, c.Good, c.Bad, c.Bad/c.Good, c.GoodTTFT, c.BadTTFT, c.GoodPollMax, c.BadPollMax)
		assert.Greater(t, c.BadPollMax, c.GoodPollMax, "%s: the replay's checks wait", c.Job.Name)
	}
	seed, nic := costs[0], costs[1]
	assert.InDelta(t, 1, seed.Bad/seed.Good, 0.02, "seed 001's shape: a short handover costs next to nothing")
	assert.Less(t, nic.Bad/nic.Good, 0.8, "across a NIC the blocking wait costs a fifth or more")
	assert.Greater(t, nic.BadTTFT, 1.3*nic.GoodTTFT, "and TTFT grows with it")
}
