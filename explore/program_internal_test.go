package explore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/sim"
)

// A failure's replay line runs the test alone with the schedule's seed,
// strategy and size, and with -rankrun.seed set Program runs exactly that
// one schedule.
func TestProgramReplayLine(t *testing.T) {
	f := &ProgramFailure{Ranks: 3, Seed: 42, Strategy: sim.PCT}
	require.Equal(t, "go test -run '^TestProgramReplayLine$' ./explore -rankrun.seed=42 -rankrun.strategy=pct -rankrun.ranks=3", replayCommand(t, f, ""))

	*replaySeed, *replayStrategy, *replayRanks = 42, "pct", 2
	defer func() { *replaySeed, *replayStrategy, *replayRanks = 0, "random", 0 }()
	sizes := map[int]bool{}
	res := Program(t, 5, func(ctx context.Context, c comm.Comm) error {
		sizes[c.Size()] = true
		return c.Barrier(ctx)
	}, ProgramOptions{Seeds: 100})
	require.Equal(t, 1, res.Schedules, "a replay runs one schedule")
	require.Equal(t, map[int]bool{2: true}, sizes, "on the replay's world size")
}
