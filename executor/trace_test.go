package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
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
		`{"timestamp": 4000, "input_length": 20, "output_length": 1, "hash_ids": [0]}`,
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
	wantIn := []int{40, 17, 512, 8, 64, 33, 20}
	wantOut := []int{3, 1, 2, 5, 2, 4, 1}
	wantAt := []time.Duration{0, 0, 125 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 2 * time.Second}
	// Prefix reuse by hand: every prompt but the 900-token one (clipped to
	// 512) is shorter than a 512-token prefix block, so each covers its
	// first id only; a CTX pool of 64 blocks of 8 tokens is one prefix
	// block. One instance: requests 2, 3, 5 hit block 0 (16, 511 and 63
	// tokens: all but the last), request 6's block 7 evicts it, and
	// request 7 misses it (unbounded: it hits, 19 more). Two instances
	// (i mod 2): instance 0 sees requests 1, 3, 5, 7 and hits 511+63+19;
	// instance 1's requests 2, 4, 6 share nothing.
	const input = 40 + 17 + 512 + 8 + 64 + 33 + 20
	for _, layout := range []struct {
		ctx, gen string
		prefix   executor.PrefixReport
	}{
		{"tp=2", "tp=1", executor.PrefixReport{BlockTokens: 512, PoolBlocks: 1, Instances: 1, Share: 590.0 / input, UnboundedShare: 609.0 / input}},
		{"dp=2", "tp=2,dp=2", executor.PrefixReport{BlockTokens: 512, PoolBlocks: 1, Instances: 2, Share: 593.0 / input, UnboundedShare: 593.0 / input}},
		{"cp=2", "tp=2", executor.PrefixReport{BlockTokens: 512, PoolBlocks: 2, Instances: 1, Share: 609.0 / input, UnboundedShare: 609.0 / input}},
	} {
		t.Run(layout.ctx+"->"+layout.gen, func(t *testing.T) {
			arr, err := executor.ParseArrival("trace=" + path + ":scale=2")
			require.NoError(t, err)
			cfg := baseConfig(layout.ctx, layout.gen, transceiver.Async)
			cfg.Workload, err = executor.TraceWorkload(arr, 0, 1)
			require.NoError(t, err)
			require.Equal(t, 7, cfg.Workload.Requests)
			cfg.Records = true
			rep, _, err := runSim(t.Context(), cfg, sim.Config{Seed: 1, Checked: true})
			require.NoError(t, err)
			require.True(t, rep.OK(), "%+v", rep.Errors)
			require.Equal(t, 7, rep.RequestsCompleted)
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
			require.NotNil(t, tr.Prefix)
			require.Equal(t, executor.TraceReport{File: path, Format: "mooncake-jsonl", Rows: 7, Requests: 7, Pace: "recorded", Scale: 2, ArrivalS: 2,
				InputP50: 33, InputP99: 900, OutputP50: 2, OutputP99: 5, Clipped: 1, ClipTokens: 512, Prefix: &layout.prefix}, *tr)
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
	_, err = executor.TraceWorkload(arr, 6, 7)
	require.ErrorContains(t, err, "holds 5 requests, fewer than the 6 asked")
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

// Under mpirun every process reads the trace itself: a rank whose file
// differs (here one row's answer length) fails the start on every rank
// with ErrConfig naming the ranks that differ from world rank 0, at every
// position (world rank 0 itself, a middle rank, the last), never a hang.
func TestRanksAgreeOnTheTrace(t *testing.T) {
	defer goleak.VerifyNone(t)
	same := traceFile(t)
	b, err := os.ReadFile(same)
	require.NoError(t, err)
	other := filepath.Join(t.TempDir(), "other.jsonl")
	require.NoError(t, os.WriteFile(other, []byte(strings.Replace(string(b), `"output_length": 5`, `"output_length": 6`, 1)), 0o644))
	load := func(path string) executor.Config {
		arr, err := executor.ParseArrival("trace=" + path)
		require.NoError(t, err)
		cfg := baseConfig("tp=2", "tp=2", transceiver.Async)
		cfg.Workload, err = executor.TraceWorkload(arr, 0, 1)
		require.NoError(t, err)
		return cfg
	}
	for _, c := range []struct {
		odd  int
		want string
	}{{0, "world ranks [1 2 3]"}, {2, "world ranks [2]"}, {3, "world ranks [3]"}, {-1, ""}} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		errs := local.RunAll(ctx, 4, local.Config{Timeout: 10 * time.Second}, func(ctx context.Context, world comm.Comm) error {
			cfg := load(same)
			if world.Rank() == c.odd {
				cfg = load(other)
			}
			_, _, err := executor.RunRank(ctx, world, cfg)
			return err
		})
		cancel()
		for r, err := range errs {
			if c.odd < 0 {
				require.NoError(t, err, "world rank %d", r)
				continue
			}
			require.ErrorIs(t, err, executor.ErrConfig, "world rank %d", r)
			require.ErrorContains(t, err, c.want+" replay other requests than world rank 0")
		}
	}
}

// poisson=R draws gaps of mean 1/R (2000 of them: within 10%), keeping
// the rows' lengths in order; a rate whose arrivals would span more than
// MaxArrivalSpan is refused, as for a synthetic workload; a workload whose
// count and window disagree is refused by Validate.
func TestTracePoissonPace(t *testing.T) {
	arr, err := executor.ParseArrival("trace=../traces/mooncake_conversation_trace.jsonl:poisson=100")
	require.NoError(t, err)
	w, err := executor.TraceWorkload(arr, 2001, 1)
	require.NoError(t, err)
	reqs := w.Generate()
	mean := reqs[len(reqs)-1].At / time.Duration(len(reqs)-1)
	require.InEpsilon(t, float64(10*time.Millisecond), float64(mean), 0.1, "mean gap %v", mean)
	require.InEpsilon(t, 100, w.OfferedRate(), 1e-12)
	rows := arr.Trace.Trace.Requests
	for i, q := range reqs {
		require.Equal(t, rows[i].Input, q.Tokens)
		require.Equal(t, rows[i].Output, q.Output)
	}
	require.NoError(t, w.Validate())
	slow, err := executor.ParseArrival("trace=../traces/mooncake_conversation_trace.jsonl:poisson=1e-12")
	require.NoError(t, err)
	w, err = executor.TraceWorkload(slow, 3, 1)
	require.NoError(t, err)
	require.ErrorContains(t, w.Validate(), "they would arrive over 2e+12 s, more than 1e+08 s")
	w, err = executor.TraceWorkload(arr, 5, 1)
	require.NoError(t, err)
	w.Requests = 4
	require.ErrorContains(t, w.Validate(), "workload requests 4: the trace window's first 5 are replayed")
}
