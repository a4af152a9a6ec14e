package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/transceiver"
)

// traceFile writes a small Mooncake-format trace: ties, a gap, and one
// prompt (900 tokens) longer than the test pools hold (64 blocks of 8
// tokens: 512).
func traceFile(t *testing.T) string {
	t.Helper()
	rows := []string{
		`{"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [0, 1]}`,
		`{"timestamp": 0, "input_length": 17, "output_length": 1, "hash_ids": [0, 2]}`,
		`{"timestamp": 250, "input_length": 900, "output_length": 2, "hash_ids": [0, 1, 3]}`,
		`{"timestamp": 1000, "input_length": 8, "output_length": 5}`,
		`{"timestamp": 1000, "input_length": 64, "output_length": 2, "hash_ids": [0, 1, 3, 4]}`,
		`{"timestamp": 4000, "input_length": 33, "output_length": 4, "hash_ids": [7]}`,
	}
	path := filepath.Join(t.TempDir(), "mini.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(rows, "\n")+"\n"), 0o644))
	return path
}

// A replayed trace's requests arrive at the recorded times divided by the
// scale (exactly, in virtual time), carry the recorded lengths, the
// prompts clipped to what the pools hold, and the report says so.
func TestTraceReplay(t *testing.T) {
	defer goleak.VerifyNone(t)
	path := traceFile(t)
	wantIn := []int{40, 17, 512, 8, 64, 33}
	wantOut := []int{3, 1, 2, 5, 2, 4}
	wantAt := []time.Duration{0, 0, 125 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}
	for _, layout := range []struct{ ctx, gen string }{{"tp=2", "tp=1"}, {"dp=2", "tp=2,dp=2"}} {
		t.Run(layout.ctx+"->"+layout.gen, func(t *testing.T) {
			arr, err := executor.ParseArrival("trace=" + path + ":scale=2")
			require.NoError(t, err)
			cfg := baseConfig(layout.ctx, layout.gen, transceiver.Async)
			cfg.Workload, err = executor.TraceWorkload(arr, 0, 1)
			require.NoError(t, err)
			require.Equal(t, 6, cfg.Workload.Requests)
			cfg.Records = true
			rep, _, err := executor.RunSim(t.Context(), cfg, sim.Config{Seed: 1, Checked: true})
			require.NoError(t, err)
			require.True(t, rep.OK(), "%+v", rep.Errors)
			require.Equal(t, 6, rep.RequestsCompleted)
			byID := map[request.ID]executor.RequestRecord{}
			for _, q := range rep.Requests {
				byID[q.ID] = q
			}
			for i := range wantIn {
				q := byID[request.ID(i+1)]
				require.Equal(t, wantIn[i], q.Tokens, "request %d's prompt", i+1)
				require.Equal(t, wantOut[i], q.Output, "request %d's answer", i+1)
				require.Equal(t, wantAt[i].Nanoseconds(), q.Arrival, "request %d's arrival", i+1)
			}
			tr := rep.Trace
			require.NotNil(t, tr)
			require.Equal(t, executor.TraceReport{File: path, Format: "mooncake-jsonl", Rows: 6, Requests: 6, Pace: "recorded", Scale: 2, ArrivalS: 2,
				InputP50: 33, InputP99: 512, OutputP50: 2, OutputP99: 5, Clipped: 1, ClipTokens: 512, Prefix: tr.Prefix}, *tr)
			require.NotNil(t, tr.Prefix)
			require.Contains(t, rep.Workload, "1 prompts clipped to 512 tokens")
		})
	}
}

// --requests N takes the window's first N; poisson=R keeps the lengths and
// draws its own arrivals; the in-process backend replays the same lengths.
func TestTraceWindowAndPoisson(t *testing.T) {
	defer goleak.VerifyNone(t)
	path := traceFile(t)
	arr, err := executor.ParseArrival("trace=" + path + ":from=250ms:poisson=50")
	require.NoError(t, err)
	cfg := baseConfig("tp=2", "tp=2", transceiver.Sync)
	cfg.Workload, err = executor.TraceWorkload(arr, 3, 7)
	require.NoError(t, err)
	cfg.Records = true
	rep := run(t, cfg)
	require.Equal(t, 3, rep.RequestsCompleted)
	got := map[request.ID]int{}
	for _, q := range rep.Requests {
		got[q.ID] = q.Tokens
	}
	require.Equal(t, map[request.ID]int{1: 512, 2: 8, 3: 64}, got)
	reqs := cfg.Workload.Generate()
	require.Equal(t, time.Duration(0), reqs[0].At)
	require.NotEqual(t, reqs[1].At, reqs[2].At, "Poisson gaps, not the recorded tie")
	_, err = executor.TraceWorkload(arr, 5, 7)
	require.ErrorContains(t, err, "holds 4 requests, fewer than the 5 asked")
}

// A pool past int32 blocks is refused with the configuration, naming the
// side and the rule, before any rank starts (not by the pool at run time).
func TestPoolBlocksBound(t *testing.T) {
	for _, side := range []string{"ctx", "gen"} {
		cfg := baseConfig("tp=1", "tp=1", transceiver.Async)
		if side == "ctx" {
			cfg.CtxBlocks = 4_000_000_000
		} else {
			cfg.GenBlocks = 4_000_000_000
		}
		cfg.Defaults()
		err := cfg.Validate()
		require.ErrorIs(t, err, executor.ErrConfig)
		require.ErrorContains(t, err, side+" pool blocks = 4000000000: must be at most 2147483647")
	}
}
