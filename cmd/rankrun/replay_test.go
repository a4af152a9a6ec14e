package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
)

// replayReport is the part of a report these tests read.
type replayReport struct {
	ReplayNotes []string `json:"replay_notes"`
	Errors      []string `json:"errors"`
	IdleStepMs  struct {
		Max float64 `json:"max"`
	} `json:"idle_step_ms"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Throughput float64 `json:"throughput_rps"`
	TTFTMs     struct {
		P50 float64 `json:"p50"`
	} `json:"ttft_ms"`
	Failed     int `json:"requests_failed"`
	Cancelled  int `json:"requests_cancelled"`
	TransferMs struct {
		Max float64 `json:"max"`
	} `json:"transfer_ms"`
	Instances []struct {
		MaxPollWaitMs float64 `json:"max_poll_wait_ms"`
	} `json:"instances"`
}

// The run each replay's note names shows that replay's bug, and passes
// without the replay: the note is a way out, not a guess. It says nothing
// of that run but, for the replays that fail no run, that their bug is
// time, which the run shows against the same run without the replay.
func TestReplayExamplesShowTheBug(t *testing.T) {
	for _, r := range executor.Replays {
		t.Run(string(r), func(t *testing.T) {
			flags, symptom := executor.ReplayExample(r)
			args := append(append([]string{"run"}, strings.Fields(flags)...), "--json")
			code, out, errOut := cli(t, args...)
			require.Equal(t, 0, code, "without the replay: %s", errOut)
			var fixed replayReport
			require.NoError(t, json.Unmarshal([]byte(out), &fixed), errOut)

			code, out, errOut = cli(t, append(args, "--replay", string(r))...)
			var rep replayReport
			require.NoError(t, json.Unmarshal([]byte(out), &rep), "exit %d: %s", code, errOut)
			for _, n := range rep.ReplayNotes {
				assert.NotContains(t, n, "cannot show", "the example itself")
			}
			switch r {
			case executor.UnclampedPoll:
				require.Equal(t, 0, code, errOut)
				assert.GreaterOrEqual(t, rep.IdleStepMs.Max, 95.0, "an idle step sleeps out the 100ms slice: %s", symptom)
			case executor.BlockingOutcomes:
				require.Equal(t, 0, code, errOut)
				assert.Less(t, rep.Throughput, 0.8*fixed.Throughput, "the blocking wait costs a fifth of the throughput or more: %s", symptom)
				assert.Greater(t, rep.TTFTMs.P50, 1.2*fixed.TTFTMs.P50, "and TTFT with it: %s", symptom)
			case executor.SilentStartFailure:
				require.Equal(t, 0, code, errOut)
				assert.Equal(t, [2]int{1, 0}, [2]int{fixed.Failed, fixed.Cancelled}, "the fixed build fails the request at once")
				assert.Equal(t, [2]int{0, 1}, [2]int{rep.Failed, rep.Cancelled}, "with the replay it is cancelled at its deadline: %s", symptom)
				assert.GreaterOrEqual(t, rep.TransferMs.Max, 2000.0, "%s", symptom)
				assert.Less(t, fixed.TransferMs.Max, 1.0)
			case executor.IdleMaxPoll:
				require.Equal(t, 0, code, errOut)
				assert.Zero(t, fixed.Instances[1].MaxPollWaitMs, "the fixed build's GEN poll never waits")
				assert.Equal(t, 200.0, rep.Instances[1].MaxPollWaitMs, "a GEN poll sleeps out the whole 200ms interval: %s", symptom)
				assert.Less(t, rep.Throughput, 0.2*fixed.Throughput, "%s", symptom)
			}
			if slices.Contains(executor.TimeReplays, r) {
				require.Len(t, rep.ReplayNotes, 1)
				assert.Contains(t, rep.ReplayNotes[0], "shows as time")
				return
			}
			require.Equal(t, 1, code, "with the replay the run fails (%s): %s", symptom, errOut)
			require.NotNil(t, rep.Error, "%s", out)
			assert.Empty(t, rep.ReplayNotes)
			// The error the symptom names: ErrStalled, ErrDesync (or
			// ErrCollectiveTimeout), ErrPinned.
			said := map[string][]string{"ErrStalled": {"stalled"}, "ErrDesync": {"desync", "timed out", "collective timeout"}, "ErrPinned": {"pinned by open leases"}}
			want := said[strings.TrimSuffix(strings.Fields(symptom)[0], ":")]
			require.NotEmpty(t, want, "symptom %q names no error this test knows", symptom)
			assert.True(t, slices.ContainsFunc(want, func(w string) bool { return strings.Contains(rep.Error.Message, w) }),
				"%s: %s, want one of %q", r, rep.Error.Message, want)
		})
	}
}

// On the README table's layouts (tp=1 -> tp=4, async, no fault) a replay
// that cannot show its bug says what it lacks, in the report and the JSON.
func TestReplayNotesNameWhatIsMissing(t *testing.T) {
	for _, c := range []struct {
		replay string
		want   []string
	}{
		{"no-idle-reap", []string{"--transfer sync"}},
		{"unsafe-idle-reap", []string{"--transfer sync", "GEN attention-DP"}},
		{"local-admission-gate", []string{"a CTX executor group of 2+ ranks", "pools fill unevenly", "a CTX pool the workload can fill"}},
		{"local-error-collective", []string{"a transfer that fails on a GEN rank"}},
		{"adp-early-outcome", []string{"GEN attention-DP with 2+ ranks per DP index"}},
	} {
		t.Run(c.replay, func(t *testing.T) {
			code, out, errOut := cli(t, "run", "--requests", "4", "--replay", c.replay, "--json")
			require.Equal(t, 0, code, errOut)
			var rep replayReport
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			require.Len(t, rep.ReplayNotes, 1)
			n := rep.ReplayNotes[0]
			assert.Contains(t, n, "--replay "+c.replay+" cannot show its bug in this run")
			needs, _, ok := strings.Cut(n, "; one that shows it")
			require.True(t, ok, n)
			for _, w := range c.want {
				assert.Contains(t, needs, w)
			}
			flags, _ := executor.ReplayExample(executor.Replay(c.replay))
			assert.Contains(t, n, "rankrun run "+flags+" --replay "+c.replay, "names a run that shows it")
			_, text, _ := cli(t, "run", "--requests", "4", "--replay", c.replay)
			assert.Contains(t, text, "\nnote: "+n+"\n", "the text report says it")
		})
	}
	// explore says it before its search.
	code, _, errOut := cli(t, "explore", "--replay", "unsafe-idle-reap", "--seeds", "1", "--requests", "4")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "rankrun: note: --replay unsafe-idle-reap cannot show its bug in this run: it needs --transfer sync")
	// A run that can show it gets no note.
	code, out, errOut := cli(t, "run", "--requests", "4", "--replay", "unsafe-idle-reap", "--json", "--transfer", "sync", "--gen", "dp=2,adp")
	var rep replayReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), "exit %d: %s", code, errOut)
	assert.Empty(t, rep.ReplayNotes)
}
