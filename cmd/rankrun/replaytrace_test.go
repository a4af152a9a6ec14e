package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/goodputout"
	"github.com/rankrun/rankrun/reqtrace"
)

const azureConv = "../../traces/AzureLLMInferenceTrace_conv.csv"

// The run: the Azure conversation trace's first 200 requests, its
// window and length distribution in the report, every request replayed
// with its recorded length at its recorded time (virtual time: exact).
func TestTraceRun(t *testing.T) {
	args := []string{"run", "--backend", "sim", "--model", "llama-3-70b", "--hardware", "h100", "--ctx", "tp=4", "--gen", "tp=4",
		"--arrival", "trace=" + azureConv, "--requests", "200"}
	code, out, errOut := cli(t, append(args, "--json")...)
	require.Equal(t, 0, code, errOut)
	var rep executor.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, 200, rep.RequestsCompleted)
	tr, err := reqtrace.Load(azureConv)
	require.NoError(t, err)
	want := reqtrace.Measure(tr.Requests[:200])
	require.NotNil(t, rep.Trace)
	require.Equal(t, executor.TraceReport{File: azureConv, Format: "azure-csv", Rows: 19366, Requests: 200, Pace: "recorded", Scale: 1,
		ArrivalS: tr.Requests[199].At.Seconds(), InputP50: want.InputP50, InputP99: want.InputP99, OutputP50: want.OutputP50, OutputP99: want.OutputP99,
		ClipTokens: rep.Trace.ClipTokens}, *rep.Trace)
	require.Greater(t, rep.Trace.ClipTokens, want.InputMax, "the H100 pools hold every prompt: none clipped")
	require.Contains(t, rep.Workload, "the first 200 of the trace, at the recorded times x1")
	code, out, errOut = cli(t, args...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "workload: trace "+azureConv+" (azure-csv, 19366 requests): the first 200")
}

// A bad trace file is one line naming the file, the line, the column and
// the rule, exit 2, before anything runs.
func TestTraceBadFiles(t *testing.T) {
	dir := t.TempDir()
	const header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	for _, c := range []struct{ name, body, want string }{
		{"missing-column.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,5\n", ":1:1: the header lacks column GeneratedTokens"},
		{"negative.csv", header + "2023-11-16 18:15:46.68,5,1\n2023-11-16 18:15:47.00,-3,1\n", ":3:24: ContextTokens \"-3\": must be at least 1 token"},
		{"order.jsonl", `{"timestamp": 10, "input_length": 5, "output_length": 1}` + "\n" + `{"timestamp": 9, "input_length": 5, "output_length": 1}` + "\n", ":2:1: out of order"},
		{"empty.csv", "", ": empty: no rows"},
		{"long.jsonl", `{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [` + strings.Repeat("7, ", reqtrace.MaxLine/3) + "7]}\n", ":1:1: a line longer than 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name)
			require.NoError(t, os.WriteFile(path, []byte(c.body), 0o644))
			code, out, errOut := cli(t, "run", "--backend", "sim", "--arrival", "trace="+path)
			require.Equal(t, 2, code, errOut)
			require.Empty(t, out)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, errOut)
			require.Contains(t, errOut, path+c.want)
		})
	}
}

// --input, --output and --input-jitter beside a trace are refused by
// name; so are a window that holds too few requests and a bad key.
func TestTraceRefusals(t *testing.T) {
	base := []string{"run", "--backend", "sim", "--arrival", "trace=" + azureConv + ":span=1s"}
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--input", "10"}, "--input: a trace's lengths are its own"},
		{[]string{"--output", "10"}, "--output: a trace's lengths are its own"},
		{[]string{"--input-jitter", "0.1"}, "--input-jitter: a trace's lengths are its own"},
		{[]string{"--requests", "50"}, "--requests 50 with --arrival trace=" + azureConv + ":span=1s: executor: workload: reqtrace: " + azureConv + ": the window from 0s for 1s, first 50 holds 1 requests, fewer than the 50 asked"},
	} {
		code, _, errOut := cli(t, append(base, c.extra...)...)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, c.want)
	}
	code, _, errOut := cli(t, "run", "--arrival", "trace="+azureConv+":speed=2")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "speed: unknown key (want from, span, scale or poisson)")
}

// goodput on a trace bisects over its time scale: each probe's rate is
// the scale times the window's recorded rate, and the result says both.
func TestGoodputOnATrace(t *testing.T) {
	var rows []string
	for i := range 40 { // 40 requests, 39 gaps of 200 ms: 5 requests/s recorded
		rows = append(rows, `{"timestamp": `+itoa(i*200)+`, "input_length": 64, "output_length": 8}`)
	}
	path := filepath.Join(t.TempDir(), "t.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(rows, "\n")), 0o644))
	code, out, errOut := cli(t, "goodput", "--ctx", "tp=1", "--gen", "tp=1", "--prefill-per-token", "1ms", "--decode-per-step", "2ms",
		"--slo-ttft", "500ms", "--tol", "0.1", "--arrival", "trace="+path, "--json")
	require.Equal(t, 0, code, errOut)
	var g goodputout.Report
	require.NoError(t, json.Unmarshal([]byte(out), &g), out)
	require.Equal(t, "trace="+path, g.Trace)
	require.InDelta(t, 5, g.RecordedRPS, 1e-9)
	require.Equal(t, 40, g.Requests)
	require.InDelta(t, g.RecordedRPS, g.Probes[0].Rate, 1e-9, "the first probe replays the recorded pace")
	for _, p := range g.Probes {
		require.InDelta(t, p.Rate/g.RecordedRPS, p.Scale, 1e-9)
	}
	// The CTX prefills 1000/64 = 15.6 requests/s. Faster, 40 requests
	// leave a backlog of 40(1-15.6/R) prompts of 64 ms each at the end:
	// within the 500 ms TTFT up to R = 19.4, a little more for the 10%
	// the SLO may miss; slower, nothing queues.
	require.Greater(t, g.Goodput, 8.0)
	require.Less(t, g.Goodput, 22.0)
	require.Greater(t, g.Above, g.Goodput)
	code, out, errOut = cli(t, "goodput", "--ctx", "tp=1", "--gen", "tp=1", "--prefill-per-token", "1ms", "--decode-per-step", "2ms",
		"--slo-ttft", "500ms", "--tol", "0.1", "--arrival", "trace="+path)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "replayed at a time scale the search sets (scale 1: its recorded 5 requests/s)")
	require.Contains(t, out, "on the trace: time scale ")
	// The search stays within the time scale's bounds: --rate-lo below
	// 1e-6 of the recorded rate is refused up front.
	code, _, errOut = cli(t, "goodput", "--arrival", "trace="+path, "--rate-lo", "1e-9")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--rate-lo 1e-09: on this trace (recorded 5 requests/s) a rate must be in [5e-06, 5e+06]")
	code, _, errOut = cli(t, "goodput", "--arrival", "poisson=3")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "goodput sets the arrival rate itself")
	code, _, errOut = cli(t, "goodput", "--arrival", "trace="+path+":scale=2")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "goodput sets the trace's time scale itself")
}

func itoa(i int) string { return strconv.Itoa(i) }

// An unset --timeout grows by twice the replayed arrivals' span: a
// window of two requests 15 minutes apart completes in virtual time,
// where the 10-minute default would cut it; a --timeout given holds.
func TestTraceTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slow.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"timestamp": 0, "input_length": 8, "output_length": 2}`+"\n"+
		`{"timestamp": 900000, "input_length": 8, "output_length": 2}`+"\n"), 0o644))
	code, out, errOut := cli(t, "run", "--backend", "sim", "--ctx", "tp=1", "--gen", "tp=1", "--arrival", "trace="+path)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "2 completed, 0 failed")
	code, _, errOut = cli(t, "run", "--backend", "sim", "--ctx", "tp=1", "--gen", "tp=1", "--arrival", "trace="+path, "--timeout", "10m")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "10m0s")
}

// explore searches schedules of a trace window's run: --requests unset
// takes the whole window, as run does.
func TestExploreOnATrace(t *testing.T) {
	code, out, errOut := cli(t, "explore", "--ctx", "tp=2", "--gen", "tp=1", "--arrival", "trace="+azureConv+":span=2s:scale=100", "--seeds", "2")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "explore: no failure in 2 schedules")
}
