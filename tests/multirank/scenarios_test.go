package multirank_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/scenario"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScenarios runs every testdata scenario (each in checked mode, under
// its deadline; a hang fails naming the file). A scenario with a replay
// under test runs twice: it must pass with the replay off and show the
// expected symptom with it on.
func TestScenarios(t *testing.T) {
	all, err := scenario.Load(filepath.Join("testdata", "*.txt"))
	require.NoError(t, err)
	caught := map[executor.Replay][]string{}
	ran := 0
	runs := 0
	for _, s := range all {
		runs += len(s.Backends())
		for _, backend := range s.Backends() {
			t.Run(filepath.Base(s.File)+"/"+backend, func(t *testing.T) {
				ran++
				r := scenario.Run(context.Background(), s, scenario.WithBackend(backend))
				require.False(t, r.Hung(), "HANG in %s", r)
				if !r.Pass {
					t.Fatalf("%s", r)
				}
				t.Logf("%s", r.Reason)
				if s.ReplayUnderTest != "" {
					caught[s.ReplayUnderTest] = append(caught[s.ReplayUnderTest], filepath.Base(s.File)+"/"+backend)
				}
			})
		}
	}
	// Every replay is proven caught by at least one scenario (when the
	// whole suite ran).
	if !t.Failed() && ran == runs {
		for _, rp := range executor.Replays {
			require.NotEmpty(t, caught[rp], "no scenario proves replay %s is caught (add one with replay-under-test: %s)", rp, rp)
			t.Logf("replay %s caught by %v", rp, caught[rp])
		}
	}
}

// Every scenario that proves a replay caught is a run that can show the
// replay's bug: executor.ReplayNotes, which tells a user when a run cannot
// show it, says nothing of it (its conditions are not too strict).
func TestReplayScenariosShowTheirBug(t *testing.T) {
	all, err := scenario.Load(filepath.Join("testdata", "*.txt"))
	require.NoError(t, err)
	n := 0
	for _, s := range all {
		if s.ReplayUnderTest == "" {
			continue
		}
		n++
		cfg, err := s.Config(true)
		require.NoError(t, err, s.File)
		for _, note := range executor.ReplayNotes(&cfg) {
			require.NotContains(t, note, "cannot show", "%s: %s", s.File, note)
		}
	}
	require.GreaterOrEqual(t, n, len(executor.Replays))
}
