package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/topology"
)

// modelReport is what the cost-model tests read of a JSON report.
type modelReport struct {
	Compute       string  `json:"compute"`
	KVSample      int     `json:"kv_sample"`
	ThroughputRPS float64 `json:"throughput_rps"`
	TTFTMs        struct {
		P50 float64 `json:"p50"`
	} `json:"ttft_ms"`
	TPOTMs struct {
		N   int     `json:"n"`
		P50 float64 `json:"p50"`
		Max float64 `json:"max"`
	} `json:"tpot_ms"`
	Errors   []string       `json:"errors"`
	Requests []modelRequest `json:"-"` // from --requests-out
}

// modelRequest is the part of a --requests-out record these tests read.
type modelRequest struct {
	Tokens       int   `json:"input_tokens"`
	Output       int   `json:"output_tokens"`
	PrefillStart int64 `json:"prefill_start_ns"`
	PrefillEnd   int64 `json:"prefill_end_ns"`
	FirstToken   int64 `json:"first_token_ns"`
	Done         int64 `json:"done_ns"`
}

// tpot is the mean time per output token after the first, in ms.
func (r modelReport) tpot() float64 {
	var sum float64
	for _, q := range r.Requests {
		sum += float64(q.Done-q.FirstToken) / float64(q.Output-1) / 1e6
	}
	return sum / float64(len(r.Requests))
}

// simModel runs rankrun run --backend sim with the cost model and returns
// its report.
func simModel(t *testing.T, args ...string) modelReport {
	t.Helper()
	// Every byte still moves and is verified, 1/32 of each head's
	// elements (--kv-sample): the race detector makes full heads slow.
	base := []string{"run", "--backend", "sim", "--model", "llama-3-8b", "--hardware", "h100", "--json", "--kv-sample", "32"}
	r, _ := runWithRecords(t, append(base, args...)...)
	return r
}

// runWithRecords runs a rankrun run command line that must succeed with
// --json, with --requests-out, and returns its report (records parsed)
// and the records file as written.
func runWithRecords(t *testing.T, args ...string) (modelReport, string) {
	t.Helper()
	records := filepath.Join(t.TempDir(), "requests.jsonl")
	code, out, errOut := cli(t, append(args, "--requests-out", records)...)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	var r modelReport
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Empty(t, r.Errors)
	lines, err := os.ReadFile(records)
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		r.Requests = append(r.Requests, modelRequest{})
		require.NoError(t, json.Unmarshal([]byte(line), &r.Requests[len(r.Requests)-1]), line)
	}
	return r, string(lines)
}

// The executor sleeps exactly what the cost model answers: each request's
// prefill span is the model's prefill of its batch, in virtual time.
func TestRunSleepsTheModel(t *testing.T) {
	r := simModel(t, "--ctx", "tp=2", "--gen", "tp=1", "--requests", "3", "--input", "2048", "--output", "2", "--arrival", "closed=1")
	assert.Contains(t, r.Compute, "llama-3-8b on h100-nvlink-ib400")
	hw, err := costmodel.ParseHardware("h100")
	require.NoError(t, err)
	p := costmodel.Placement{Model: costmodel.Models["llama-3-8b"], HW: hw, Ctx: topology.MustParseLayout("tp=2"), Gen: topology.MustParseLayout("tp=1")}
	want := p.Prefill([]costmodel.Seq{{Tokens: 2048}})
	require.Len(t, r.Requests, 3)
	for _, q := range r.Requests {
		assert.Equal(t, want, time.Duration(q.PrefillEnd-q.PrefillStart), "closed=1: one request per batch")
	}
	// Each decode step after the first token is the model's step over the
	// context so far (prompt plus tokens generated): one request at a time.
	r = simModel(t, "--ctx", "tp=2", "--gen", "tp=1", "--requests", "2", "--input", "2048", "--output", "5", "--arrival", "closed=1")
	var steps time.Duration
	for k := 1; k < 5; k++ {
		steps += p.Decode([]costmodel.Seq{{Tokens: 2048 + k}})
	}
	for _, q := range r.Requests {
		assert.Equal(t, steps, time.Duration(q.Done-q.FirstToken))
	}
	// --prefill-per-token overrides the model.
	r = simModel(t, "--ctx", "tp=2", "--gen", "tp=1", "--requests", "2", "--input", "2048", "--output", "2", "--arrival", "closed=1",
		"--prefill-per-token", "10us")
	for _, q := range r.Requests {
		assert.Equal(t, 2048*10*time.Microsecond, time.Duration(q.PrefillEnd-q.PrefillStart))
	}
	assert.Contains(t, r.Compute, "the constants override the model")
}

// Sweeps move the way a practitioner expects, by roughly the size expected:
// TP=2 cuts the TTFT of a long prompt (not below half), TP=2 on the GEN
// side cuts TPOT (memory-bound decode reads half the weights per GPU), and
// and a second CTX replica (DP=2) nearly doubles the throughput of a
// prefill-bound burst (prefill is compute-bound: two GPUs, two prefills).
func TestSweepDirections(t *testing.T) {
	ttft := func(ctx string) float64 {
		return simModel(t, "--ctx", ctx, "--gen", "tp=1", "--requests", "2", "--input", "4096", "--output", "2", "--arrival", "closed=1").TTFTMs.P50
	}
	one, two := ttft("tp=1"), ttft("tp=2")
	t.Logf("TTFT of 4096 tokens: ctx tp=1 %.1f ms, tp=2 %.1f ms (x%.2f)", one, two, two/one)
	assert.Less(t, two, 0.7*one, "TP=2 cuts a long prefill's TTFT")
	assert.Greater(t, two, 0.5*one, "but never below half")

	tpot := func(gen string) float64 {
		return simModel(t, "--ctx", "tp=1", "--gen", gen, "--requests", "2", "--input", "512", "--output", "16", "--arrival", "closed=1").tpot()
	}
	g1, g2 := tpot("tp=1"), tpot("tp=2")
	t.Logf("TPOT: gen tp=1 %.2f ms, tp=2 %.2f ms (x%.2f)", g1, g2, g2/g1)
	assert.Less(t, g2, 0.7*g1, "TP=2 cuts TPOT")
	assert.Greater(t, g2, 0.5*g1)

	tput := func(ctx string) float64 {
		return simModel(t, "--ctx", ctx, "--gen", "tp=2", "--requests", "8", "--input", "2048", "--output", "2", "--arrival", "burst").ThroughputRPS
	}
	d1, d2 := tput("tp=1"), tput("dp=2")
	t.Logf("throughput, prefill-bound burst: ctx tp=1 %.1f rps, dp=2 %.1f rps (x%.2f)", d1, d2, d2/d1)
	assert.Greater(t, d2, 1.7*d1, "a second CTX replica nearly doubles prefill throughput")
	assert.LessOrEqual(t, d2, 2*d1)
}

func TestModelBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"layers": 4, "hidden": 64, "heads": 3, "kv_heads": 2}`), 0o644))
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown model", []string{"--model", "llama-9"}, []string{"--model", "llama-3-8b"}},
		{"bad file", []string{"--model", bad, "--hardware", "h100"}, []string{"--model", "bad.json", "head_dim = 0"}},
		{"no compute", []string{"--model", "llama-3-8b"}, []string{"--hardware zero", "no compute figures"}},
		{"unknown hardware", []string{"--hardware", "tpu"}, []string{"--hardware", "h100"}},
		{"does not fit", []string{"--model", "llama-3-70b", "--hardware", "h100", "--ctx", "tp=1"}, []string{"ctx layout tp=1", "exceed 90%"}},
		{"geometry clash", []string{"--model", "llama-3-8b", "--hardware", "h100", "--head-dim", "64"}, []string{"--head-dim", "the model defines"}},
		{"efficiency", []string{"--model", "llama-3-8b", "--hardware", "h100", "--compute-eff", "1.5"}, []string{"--compute-eff 1.5", "[0.01, 1]"}},
		{"efficiency without model", []string{"--memory-eff", "0.5"}, []string{"--memory-eff", "give --model"}},
		{"kv efficiency without model", []string{"--kv-eff", "0.5"}, []string{"--kv-eff", "give --model"}},
		{"ctx ep without model", []string{"--ctx", "tp=2,ep=2"}, []string{"--ctx tp=2,ep=2", "MoE --model"}},
		{"gen ep without model", []string{"--gen", "dp=2,ep=2,adp", "--backend", "sim"}, []string{"--gen dp=2,ep=2,adp", "MoE --model"}},
		{"kv efficiency", []string{"--model", "llama-3-8b", "--hardware", "h100", "--kv-eff", "2"}, []string{"--kv-eff 2", "[0.01, 1]"}},
		{"sample divides", []string{"--model", "llama-3-8b", "--hardware", "h100", "--backend", "sim", "--kv-sample", "3"}, []string{"--kv-sample 3", "divisor", "128"}},
		{"sample needs sim", []string{"--model", "llama-3-8b", "--hardware", "h100", "--kv-sample", "2"}, []string{"--kv-sample 2", "sim backend"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := cli(t, append([]string{"run", "--requests", "2"}, c.args...)...)
			oneLine(t, code, out, errOut, c.want...)
		})
	}
	// explore has no model key: it says so instead of ignoring --model.
	code, out, errOut := cli(t, "explore", "--model", "llama-3-8b", "--hardware", "h100", "--seeds", "1")
	oneLine(t, code, out, errOut, "--model", "explore")
	assert.False(t, strings.Contains(errOut, "panic"))
	// Nor does it drop --chunked: it needs the budget a scenario lacks.
	code, out, errOut = cli(t, "explore", "--chunked", "--seeds", "1")
	oneLine(t, code, out, errOut, "--chunked", "--max-tokens")
}

// run reports TPOT as sweep does: per completed request of two or more
// output tokens, (done - first token) / (output - 1), within the sketch's
// accuracy of what the request records say.
func TestRunReportsTPOT(t *testing.T) {
	r := simModel(t, "--ctx", "tp=1", "--gen", "tp=1", "--requests", "4", "--input", "512", "--output", "16", "--arrival", "closed=1")
	require.Equal(t, 4, r.TPOTMs.N)
	want := r.tpot()
	assert.Positive(t, want)
	assert.InEpsilon(t, want, r.TPOTMs.P50, 0.02, "closed=1: every request decodes alone, alike")
	assert.InEpsilon(t, want, r.TPOTMs.Max, 0.02)
	r = simModel(t, "--ctx", "tp=1", "--gen", "tp=1", "--requests", "2", "--input", "64", "--output", "1", "--arrival", "closed=1")
	assert.Zero(t, r.TPOTMs.N, "one output token: no time per output token")
}

// The compute line names each precision's efficiency; --compute-eff sets
// every precision's, GB200's fitted FP4 one included.
func TestComputeEffFlagSetsEveryPrecision(t *testing.T) {
	args := []string{"run", "--backend", "sim", "--model", "deepseek-r1-fp4", "--hardware", "gb200", "--ctx", "tp=4", "--gen", "tp=4",
		"--requests", "1", "--input", "64", "--output", "2"}
	code, out, errOut := cli(t, args...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "5000 TFLOPS fp8 at 42%, experts 10000 TFLOPS fp4 at 35%")
	code, out, errOut = cli(t, append(args, "--compute-eff", "0.5")...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "5000 TFLOPS fp8 at 50%, experts 10000 TFLOPS fp4 at 50%")
}

// A model's routing reaches the runtime whole: DeepSeek-R1's groups (4 of
// 8 a token) route its dispatch counts as the cost model prices them.
func TestModelRoutingReachesTheRuntime(t *testing.T) {
	for _, name := range []string{"deepseek-r1", "deepseek-r1-fp4", "gpt-oss-120b"} {
		var f runFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f.Register(fs, true)
		require.NoError(t, fs.Parse([]string{"--backend", "sim", "--model", name, "--hardware", "gb200", "--ctx", "dp=8,ep=8,adp", "--gen", "tp=8,ep=8"}))
		c, err := f.Config()
		require.NoError(t, err, name)
		assert.Equal(t, costmodel.Models[name].Routing(), c.Routing, name)
	}
	assert.Equal(t, 4, costmodel.Models["deepseek-r1"].Routing().GroupsPerToken)
}
