package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/topology"
)

// rankrun throughput is a thin shell over costmodel.Placement.Offline: each
// --layout's row is the model's steady state, the scheduler's flags reach
// it, and PP 8 comes out ahead of TP 8 for Llama-3.1-405B FP8 on H200 at
// max throughput, as NVIDIA's blog has it.
func TestThroughputCommand(t *testing.T) {
	code, js, errOut := cli(t, "throughput", "--model", "llama-3.1-405b", "--precision", "fp8", "--hardware", "h200",
		"--layout", "tp=8", "--layout", "pp=8", "--in", "1000", "--out", "1000", "--json")
	require.Equal(t, 0, code, errOut)
	var rows []throughputRow
	require.NoError(t, json.Unmarshal([]byte(js), &rows))
	require.Len(t, rows, 2)
	m := costmodel.Models["llama-3.1-405b"]
	m.WeightBytes, m.KVBytes, m.Precision = 1, 1, "fp8"
	p := costmodel.Placement{Model: m, HW: costmodel.Hardwares["h200-nvlink-ib400"]}
	for i, spec := range []string{"tp=8", "pp=8"} {
		st, err := p.Offline(topology.MustParseLayout(spec), costmodel.Scheduler{}, 1000, 1000)
		require.NoError(t, err)
		assert.Equal(t, spec, rows[i].Layout)
		assert.Equal(t, 8, rows[i].GPUs)
		assert.InDelta(t, st.Throughput, rows[i].Throughput, 1e-9*st.Throughput, spec)
		assert.InDelta(t, st.Throughput/8, rows[i].PerGPU, 1e-9*st.Throughput, spec)
		assert.Equal(t, st.Bound, rows[i].Bound, spec)
	}
	assert.Greater(t, rows[1].Throughput, rows[0].Throughput, "PP 8 ahead of TP 8 at max throughput")

	// The scheduler's flags: a smaller max batch holds the batch.
	code, out, errOut := cli(t, "throughput", "--model", "llama-3-70b", "--precision", "fp8", "--hardware", "h100", "--layout", "tp=2", "--max-batch", "64")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "llama-3-70b on h100-nvlink-ib400, 1000 in / 1000 out, max_batch=64 max_tokens=8192 chunked=false\n")
	assert.Regexp(t, `(?m)^tp=2 +2 +64\.0 max_batch `, out)
}

// --requests runs a finite benchmark (costmodel.Placement.Benchmark) and
// --trtllm-bench gives each layout trtllm-bench's limits: the row is the
// validation table's figure for the same cell.
func TestThroughputBenchmark(t *testing.T) {
	code, js, errOut := cli(t, "throughput", "--model", "llama-3-8b", "--precision", "fp8", "--hardware", "h100",
		"--layout", "tp=1", "--layout", "tp=2", "--in", "128", "--out", "4096", "--requests", "1500", "--trtllm-bench", "--json")
	require.Equal(t, 0, code, errOut)
	var rows []throughputRow
	require.NoError(t, json.Unmarshal([]byte(js), &rows))
	require.Len(t, rows, 2)
	m := costmodel.Models["llama-3-8b"]
	m.WeightBytes, m.KVBytes, m.Precision = 1, 1, "fp8"
	p := costmodel.Placement{Model: m, HW: costmodel.Hardwares["h100-nvlink-ib400"]}
	for i, spec := range []string{"tp=1", "tp=2"} {
		l := topology.MustParseLayout(spec)
		sch, err := costmodel.TRTLLMBench(m, p.HW, l, 128, 4096)
		require.NoError(t, err)
		r, err := p.Benchmark(l, costmodel.Benchmark{Requests: 1500, In: 128, Out: 4096, Scheduler: sch})
		require.NoError(t, err)
		assert.Equal(t, sch.String(), rows[i].Scheduler, spec)
		assert.InDelta(t, r.Throughput, rows[i].Throughput, 1e-9*r.Throughput, spec)
		assert.Equal(t, float64(r.Resident), rows[i].Batch, spec)
		assert.Equal(t, r.Steps, rows[i].Steps, spec)
		assert.Equal(t, "run", rows[i].Bound, spec)
	}
	for _, r := range costmodel.Published {
		if r.Name == "tput-8b-h100-tp1-128/4096" {
			assert.InDelta(t, r.Predict(), rows[0].Throughput, 1e-9*rows[0].Throughput, "the validation row's figure")
		}
	}
	// The text names each layout's limits; --overlap reaches the steady state.
	code, out, errOut := cli(t, "throughput", "--model", "llama-3-8b", "--precision", "fp8", "--hardware", "h100",
		"--layout", "tp=1", "--in", "128", "--out", "4096", "--requests", "1500", "--trtllm-bench")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, ", a run of 1500 requests, trtllm-bench's limits a layout\n")
	assert.Contains(t, out, "\ntp=1: max_batch=256 max_tokens=2048 chunked=false overlap=true\n")
	// Under PP the limits printed are a whole step's, and say so.
	code, out, errOut = cli(t, "throughput", "--model", "llama-3.1-405b", "--precision", "fp8", "--hardware", "h200",
		"--layout", "tp=4,pp=2", "--in", "1000", "--out", "1000", "--requests", "100", "--trtllm-bench")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "\ntp=4,pp=2: max_batch=1536 max_tokens=4096 chunked=false overlap=true (a step's; trtllm-bench's max_batch_size and max_num_tokens are a micro-batch's, 1/2 of them)\n")
	code, js, errOut = cli(t, "throughput", "--model", "llama-3.1-405b", "--precision", "fp8", "--hardware", "h200",
		"--layout", "tp=4,pp=2", "--layout", "tp=8", "--in", "1000", "--out", "1000", "--requests", "100", "--trtllm-bench", "--json")
	require.Equal(t, 0, code, errOut)
	rows = nil
	require.NoError(t, json.Unmarshal([]byte(js), &rows))
	require.Len(t, rows, 2)
	assert.Contains(t, rows[0].SchedulerNote, "1/2 of them")
	assert.Empty(t, rows[1].SchedulerNote, "no note without PP")
	code, out, errOut = cli(t, "throughput", "--model", "llama-3-8b", "--precision", "fp8", "--hardware", "h100", "--layout", "tp=1", "--overlap")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "max_batch=2048 max_tokens=8192 chunked=false overlap=true\n")
}

// Bad input: exit 2 and one line naming the flag and the rule.
func TestThroughputErrors(t *testing.T) {
	base := []string{"throughput", "--model", "llama-3-70b", "--precision", "fp8", "--hardware", "h100"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"throughput", "--layout", "tp=2"}, "--model is required"},
		{base, "--layout is required"},
		{append(base[:len(base):len(base)], "--layout", "tp=2", "--in", "0"), "--in 0 --out 1000: both must be at least 1"},
		{append(base[:len(base):len(base)], "--layout", "tp=2", "--max-batch", "0"), "--max-batch 0: must be at least 1"},
		{append(base[:len(base):len(base)], "--layout", "tp=2", "--max-tokens", "0"), "--max-tokens 0: must be at least 1"},
		{append(base[:len(base):len(base)], "--layout", "tp=2,cp=2"), "cp = 2: throughput is modelled for cp = 1"},
		{append(base[:len(base):len(base)], "--layout", "tp=2", "--in", "9000"), "a prompt longer than max_tokens (8192) needs chunked prefill"},
		{append(base[:len(base):len(base)], "--layout", "tp=3x"), "--layout tp=3x"},
		{[]string{"throughput", "--model", "llama-3-70b", "--hardware", "h100", "--layout", "tp=1"}, "exceed 90% of the 80 GB of HBM"},
		{[]string{"throughput", "--model", "llama-3-70b", "--precision", "fp9", "--layout", "tp=2"}, `--precision "fp9": must be fp8, fp4, bf16`},
		{[]string{"throughput", "--model", "llama-3-70b", "--precision", "fp4", "--hardware", "h100", "--layout", "tp=2"}, "has no fp4 peak"},
		{[]string{"throughput", "--model", "llama-3-70b", "--hardware", "zero", "--layout", "tp=2"}, "has no compute figures"},
		{append(base[:len(base):len(base)], "--layout", "tp=2", "--requests", "-1"), "--requests -1: must be in [1, 1000000] (or 0: the steady state)"},
		{append(base[:len(base):len(base)], "--layout", "tp=2", "--requests", "1000001"), "--requests 1000001: must be in [1, 1000000]"},
		{[]string{"throughput", "--model", "llama-3.1-405b", "--precision", "fp8", "--hardware", "h100", "--layout", "tp=8", "--in", "500000", "--out", "500000", "--requests", "10", "--trtllm-bench"},
			"its estimate of the KV cache"},
		{append(base[:len(base):len(base)], "--layout", "tp=2", "--trtllm-bench"), "--trtllm-bench: needs --requests"},
		{append(base[:len(base):len(base)], "--layout", "tp=2", "--requests", "10", "--trtllm-bench", "--max-tokens", "100", "--chunked"), "--trtllm-bench picks the limits itself: drop --chunked --max-tokens"},
		{append(base[:len(base):len(base)], "--layout", "tp=1,dp=2", "--requests", "10"), "dp = 2: a finite run is modelled for one DP index"},
	} {
		code, out, errOut := cli(t, c.args...)
		assert.Equal(t, 2, code, "%v: %s", c.args, errOut)
		assert.Empty(t, out, c.args)
		assert.Contains(t, errOut, c.want, c.args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line: %q", c.args, errOut)
	}
}
