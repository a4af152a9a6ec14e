package exploretest

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/explore"
)

// A failure's replay line runs the test alone with the schedule's seed,
// strategy and size, and with -rankrun.seed set Program runs exactly that
// one schedule.
func TestProgramReplayLine(t *testing.T) {
	f := &explore.ProgramFailure{Ranks: 3, Seed: 42, Strategy: sim.PCT}
	require.Equal(t, "go test -run '^TestProgramReplayLine$' ./explore/exploretest -rankrun.seed=42 -rankrun.strategy=pct -rankrun.ranks=3", replayCommand(t, f, ""))
	// A subtest's line runs that subtest alone, its name's every level
	// anchored and quoted.
	t.Run("tp=2/pp.1 x", func(t *testing.T) {
		require.Equal(t, `go test -run '^TestProgramReplayLine$/^tp=2$/^pp\.1_x$' ./explore/exploretest -rankrun.seed=42 -rankrun.strategy=pct -rankrun.ranks=3 -v2`,
			replayCommand(t, f, "-v2"))
	})

	*replaySeed, *replayStrategy, *replayRanks = 42, "pct", 2
	defer func() { *replaySeed, *replayStrategy, *replayRanks = 0, "random", 0 }()
	sizes := map[int]bool{}
	res := Program(t, 5, func(ctx context.Context, c comm.Comm) error {
		sizes[c.Size()] = true
		return c.Barrier(ctx)
	}, explore.ProgramOptions{Seeds: 100})
	require.Equal(t, 1, res.Schedules, "a replay runs one schedule")
	require.Equal(t, map[int]bool{2: true}, sizes, "on the replay's world size")
}

// fatalTB records Program's verdict instead of ending the test.
type fatalTB struct {
	testing.TB
	name  string
	fatal string
}

func (f *fatalTB) Helper()                   {}
func (f *fatalTB) Name() string              { return f.name }
func (f *fatalTB) Fatal(args ...any)         { f.fatal = fmt.Sprint(args...) }
func (f *fatalTB) Fatalf(s string, a ...any) { f.fatal = fmt.Sprintf(s, a...) }

// A replay runs exactly the one schedule it names, on its world size,
// even where the options would shrink a failure: its report and replay
// line name that schedule again.
func TestProgramReplayDoesNotShrink(t *testing.T) {
	*replaySeed, *replayStrategy, *replayRanks = 7, "random", 3
	defer func() { *replaySeed, *replayStrategy, *replayRanks = 0, "random", 0 }()
	tb := &fatalTB{name: "TestX"}
	fails := func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 0 {
			return fmt.Errorf("rank 0 of %d fails", c.Size())
		}
		return c.Barrier(ctx)
	}
	res := Program(tb, 5, fails, explore.ProgramOptions{MinRanks: 1})
	require.Equal(t, 1, res.Schedules)
	require.NotNil(t, res.Smallest)
	require.Equal(t, 3, res.Smallest.Ranks, "the replay shrank to another world")
	require.Contains(t, tb.fatal, "rank 0 of 3 fails")
	require.Contains(t, tb.fatal, "-rankrun.seed=7 -rankrun.strategy=random -rankrun.ranks=3")
}
