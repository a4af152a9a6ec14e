package explore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/explore"
	"github.com/rankrun/rankrun/scenario"
	"github.com/rankrun/rankrun/topology"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replayCase is a layout and workload where a replay's bug can happen,
// with the default arrival pattern (closed=4): nothing hand-tuned to show
// it.
type replayCase struct {
	replay executor.Replay
	setup  func(s *scenario.Scenario)
}

var replayCases = []replayCase{
	{executor.UnclampedPoll, func(s *scenario.Scenario) {}},
	{executor.NoIdleReap, func(s *scenario.Scenario) { s.Transfer, s.CtxBlocks = "sync", 24 }},
	{executor.UnsafeIdleReap, func(s *scenario.Scenario) { s.Gen, s.Transfer = "dp=2,adp", "sync" }},
	{executor.LocalAdmissionGate, func(s *scenario.Scenario) {
		s.Ctx, s.Gen, s.Faults = "tp=2", "tp=2", []string{"shrink-pool@ctx:1,blocks=24"}
	}},
	{executor.LocalErrorCollective, func(s *scenario.Scenario) {
		s.Gen, s.Faults = "tp=2", []string{"fail-transfer@gen:1,req=3"}
	}},
	// The attention-DP + TP layout that deadlocked before the fix.
	{executor.AdpEarlyOutcome, func(s *scenario.Scenario) { s.Gen = "tp=2,dp=2,adp" }},
	// A time-only replay: the invariant that no status check waits in
	// its local poll finds it (explore's oracles).
	{executor.BlockingOutcomes, func(s *scenario.Scenario) {}},
	// Another: a GEN rank's poll waits for a transfer whenever another
	// rank of its attention-DP group is idle (TensorRT-LLM #17299).
	{executor.IdleMaxPoll, func(s *scenario.Scenario) { s.Gen = "dp=2,adp" }},
	// The last request's transfer withheld: every rank is idle while it
	// waits for its deadline (TensorRT-LLM #17124).
	{executor.DeadlinesWhenBusy, func(s *scenario.Scenario) {
		s.Faults, s.TransferTimeout = []string{"timeout-transfer@ctx:0,req=24"}, 2e9
	}},
	// A transfer CTX rank 0 cannot start: the GEN side must hear of it
	// (vLLM #50754).
	{executor.SilentStartFailure, func(s *scenario.Scenario) {
		s.Faults, s.TransferTimeout = []string{"fail-send@ctx:0,req=5"}, 2e9
	}},
	// A gather whose datatype a rank-local fill gate picks (TensorRT-LLM
	// #19435).
	{executor.FillGateGather, func(s *scenario.Scenario) { s.Gen = "dp=2,adp" }},
	// A collective skipped on an empty local queue (SGLang #36928): the
	// search's jitter and early arrivals make two TP ranks' queues differ.
	{executor.QueueSizedCollective, func(s *scenario.Scenario) { s.Gen = "tp=2" }},
	// An MoE step a DP rank with no token skips (vLLM #43547).
	{executor.ZeroTokenSkip, func(s *scenario.Scenario) {
		s.Gen, s.Routing = "dp=2,ep=2,adp", topology.Routing{Experts: 8, TopK: 2}
	}},
}

// Every replay has a case above: a replay added without one is a replay
// the search is not shown to find.
func TestEveryReplayHasACase(t *testing.T) {
	var got []executor.Replay
	for _, rc := range replayCases {
		got = append(got, rc.replay)
	}
	require.ElementsMatch(t, executor.Replays, got)
}

// base is a healthy scenario: every request completes, nothing leaks.
func base(t *testing.T, name string, setup func(*scenario.Scenario)) scenario.Scenario {
	s := scenario.New(name)
	s.Requests, s.Input = 24, 64
	s.CollectiveTimeout, s.StallTimeout = 2e9, 2e9
	setup(&s)
	want := []string{"ok", fmt.Sprintf("completed == %d", s.Requests)}
	if len(s.Faults) > 0 && s.Faults[0][:4] == "fail" {
		want = []string{"ok", fmt.Sprintf("completed == %d", s.Requests-1), "failed == 1"}
	}
	if len(s.Faults) > 0 && strings.HasPrefix(s.Faults[0], "timeout-transfer") {
		want = []string{"ok", fmt.Sprintf("completed == %d", s.Requests-1), "cancelled == 1"}
	}
	for _, l := range want {
		require.NoError(t, s.Expect.Add(l))
	}
	return s
}

// Each replay is found by the search on a layout where its bug can happen,
// and the same search with the replay off finds nothing.
func TestExploreFindsEveryReplay(t *testing.T) {
	for _, rc := range replayCases {
		t.Run(string(rc.replay), func(t *testing.T) {
			s := base(t, string(rc.replay), rc.setup)
			clean := explore.Run(context.Background(), s, false, explore.Options{Seeds: 20})
			require.Nil(t, clean.First, "found a failure with the replay off: %v", clean.First)
			s.Replays = []executor.Replay{rc.replay}
			res := explore.Run(context.Background(), s, false, explore.Options{Seeds: 50})
			require.NotNil(t, res.First, "the replay was not found in %d schedules", res.Schedules)
			t.Logf("%s: found after %d schedules: %v", rc.replay, res.Schedules, res.First)
			// One seed, one run: the schedule replays, with the same failure.
			again := explore.Replay(context.Background(), res.First.Scenario, false)
			require.NotNil(t, again, "the failing schedule did not fail again")
			require.Equal(t, res.First.Why, again.Why)
		})
	}
}

// An interrupt (ctx ending) during the search or the shrinking is said so
// in the Result: a search cut short counts only the schedules it finished
// and reports no failure of its own making; a shrinking cut short keeps
// the failure found and the smallest case so far.
func TestRunInterrupted(t *testing.T) {
	s := base(t, "interrupted", func(s *scenario.Scenario) { s.Gen, s.Transfer = "dp=2,adp", "sync" })

	// During the search: cancelled once two schedules passed.
	ctx, cancel := context.WithCancel(context.Background())
	passed := 0
	res := explore.Run(ctx, s, false, explore.Options{Seeds: 1000, Progress: func(uint64, *explore.Failure) {
		if passed++; passed == 2 {
			cancel()
		}
	}})
	cancel()
	require.True(t, res.Interrupted)
	require.Nil(t, res.First, "an interrupt is no failure")
	require.Equal(t, 2, res.Schedules, "the schedules that ran to their end")

	// During the shrinking: cancelled as the first failure is found.
	s.Replays = []executor.Replay{executor.UnsafeIdleReap}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	res = explore.Run(ctx, s, false, explore.Options{Seeds: 50, Shrink: true, Progress: func(_ uint64, f *explore.Failure) {
		if f != nil {
			cancel()
		}
	}})
	require.NotNil(t, res.First, "the failure found before the interrupt stands")
	require.True(t, res.Interrupted, "the shrinking was cut short")
	require.Zero(t, res.Shrunk)
	require.Same(t, res.First, res.Smallest)
}
