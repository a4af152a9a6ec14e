package executor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// replayNoteCase is a run and what ReplayNotes must say it lacks for the
// replay's bug.
type replayNoteCase struct {
	replay    executor.Replay
	ctx, gen  string
	mode      transceiver.Mode
	ctxBlocks int
	faults    []executor.Fault
	want      []string // what the note says is missing; none: no note
}

func (c replayNoteCase) config() executor.Config {
	cfg := baseConfig(c.ctx, c.gen, c.mode)
	cfg.CtxBlocks, cfg.Faults = c.ctxBlocks, c.faults
	cfg.Replays = executor.ReplaySet{c.replay: true}
	return cfg
}

func (c replayNoteCase) String() string {
	return string(c.replay) + " " + c.ctx + "->" + c.gen + " " + c.mode.String()
}

var replayNoteCases = func() []replayNoteCase {
	shrink := executor.Fault{Kind: executor.FaultShrinkPool, Role: topology.Context, Rank: 1, Blocks: 8}
	fail := executor.Fault{Kind: executor.FaultFailTransfer, Role: topology.Generation, Rank: 1, Request: 3}
	return []replayNoteCase{
		{executor.NoIdleReap, "tp=1", "tp=4", transceiver.Async, 512, nil, []string{"--transfer sync"}},
		{executor.NoIdleReap, "tp=1", "tp=4", transceiver.Sync, 512, nil, nil}, // no drain either: its sends stay pinned
		{executor.NoIdleReap, "tp=1", "tp=4", transceiver.Async, 16, nil, []string{"--transfer sync"}},
		{executor.NoIdleReap, "tp=1", "tp=4", transceiver.Sync, 16, nil, nil},
		{executor.UnsafeIdleReap, "tp=1", "tp=4", transceiver.Async, 64, nil, []string{"--transfer sync", "GEN attention-DP"}},
		{executor.UnsafeIdleReap, "tp=1", "tp=4", transceiver.Sync, 64, nil, []string{"GEN attention-DP"}},
		{executor.UnsafeIdleReap, "tp=1", "dp=2,adp", transceiver.Async, 64, nil, []string{"--transfer sync"}},
		{executor.UnsafeIdleReap, "tp=1", "dp=2,adp", transceiver.Sync, 64, nil, nil},
		{executor.LocalAdmissionGate, "tp=1", "tp=2", transceiver.Async, 16, nil, []string{"a CTX executor group of 2+ ranks", "pools fill unevenly"}},
		{executor.LocalAdmissionGate, "tp=2", "tp=2", transceiver.Async, 16, nil, []string{"pools fill unevenly"}},
		{executor.LocalAdmissionGate, "tp=2", "tp=2", transceiver.Async, 512, []executor.Fault{shrink}, nil},
		{executor.LocalAdmissionGate, "cp=2", "tp=2", transceiver.Async, 512, nil, []string{"a CTX pool the workload can fill"}},
		{executor.LocalAdmissionGate, "dp=2", "tp=2", transceiver.Async, 16, nil, []string{"a CTX executor group of 2+ ranks", "pools fill unevenly"}},
		{executor.LocalAdmissionGate, "dp=2,adp", "tp=2", transceiver.Async, 16, nil, nil},
		{executor.LocalErrorCollective, "tp=1", "tp=1", transceiver.Async, 64, nil, []string{"a GEN executor group of 2+ ranks", "a transfer that fails on a GEN rank"}},
		{executor.LocalErrorCollective, "tp=1", "tp=2", transceiver.Async, 64, []executor.Fault{fail}, nil},
		{executor.AdpEarlyOutcome, "tp=1", "dp=2,adp", transceiver.Async, 64, nil, []string{"GEN attention-DP with 2+ ranks per DP index"}},
		{executor.AdpEarlyOutcome, "tp=1", "tp=4,dp=2", transceiver.Async, 64, nil, []string{"GEN attention-DP with 2+ ranks per DP index"}},
		{executor.AdpEarlyOutcome, "tp=1", "tp=4,dp=2,adp", transceiver.Async, 64, nil, nil},
		{executor.UnclampedPoll, "tp=1", "tp=4", transceiver.Sync, 64, nil, []string{"--transfer async"}},
	}
}()

// ReplayNotes names each condition a run lacks for a replay's bug, and
// only those: the same replay on a run that has them gets no note.
func TestReplayNotes(t *testing.T) {
	for _, c := range replayNoteCases {
		cfg := c.config()
		name := c.String()
		notes := executor.ReplayNotes(&cfg)
		if c.want == nil {
			assert.Empty(t, notes, name)
			continue
		}
		require.Len(t, notes, 1, name)
		needs, example, ok := strings.Cut(notes[0], "; one that shows it")
		require.True(t, ok, "%s: %s", name, notes[0])
		assert.Equal(t, len(c.want), strings.Count(needs, "; and ")+1, "%s: exactly what is missing: %s", name, needs)
		for _, w := range c.want {
			assert.Contains(t, needs, w, name)
		}
		flags, _ := executor.ReplayExample(c.replay)
		assert.Contains(t, example, "rankrun run "+flags+" --replay "+string(c.replay), name)
	}
	// unclamped-poll fails nothing even where it shows: the note says so,
	// and it is not a gap (explore, whose oracle fails it, prints gaps).
	cfg := baseConfig("tp=1", "tp=4", transceiver.Async)
	cfg.Replays = executor.ReplaySet{executor.UnclampedPoll: true}
	notes := executor.ReplayNotes(&cfg)
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "shows as time")
	assert.Empty(t, executor.ReplayGaps(&cfg))
}

// A note says "cannot show": the run, replay on, passes under every
// schedule tried (seeded, with message jitter), so the note is true.
func TestReplayNotesAreSound(t *testing.T) {
	for _, c := range replayNoteCases {
		if c.want == nil {
			continue
		}
		t.Run(c.String(), func(t *testing.T) {
			for seed := range uint64(4) {
				rep, _, err := runSim(t.Context(), c.config(), sim.Config{Seed: seed + 1, Checked: true, Jitter: 20 * time.Microsecond})
				require.NoError(t, err, "seed %d: the note says the replay cannot show its bug here", seed+1)
				wantFailed := 0
				if len(c.faults) > 0 && c.faults[0].Kind == executor.FaultFailTransfer {
					wantFailed = 1
				}
				assert.Equal(t, c.config().Workload.Requests-wantFailed, rep.RequestsCompleted, "seed %d", seed+1)
				assert.Zero(t, rep.LeakedBlocks, "seed %d", seed+1)
				assert.Zero(t, rep.PinnedBlocksAtEnd, "seed %d", seed+1)
			}
		})
	}
}
