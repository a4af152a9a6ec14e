package main

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/schollz/progressbar/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/gpu"
	"github.com/rankrun/rankrun/internal/sweepout"
	"github.com/rankrun/rankrun/topology"
)

// cli runs rankrun in-process and returns its exit code, stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := realMain(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// runReport is the part of the JSON report the tests read, by its stable
// field names.
type runReport struct {
	Ctx               string          `json:"ctx"`
	Gen               string          `json:"gen"`
	Ranks             int             `json:"ranks"`
	DurationS         float64         `json:"duration_s"`
	RequestsCompleted *int            `json:"requests_completed"`
	RequestsFailed    *int            `json:"requests_failed"`
	RequestsCancelled *int            `json:"requests_cancelled"`
	ThroughputRPS     *float64        `json:"throughput_rps"`
	TTFTMs            *dist           `json:"ttft_ms"`
	IdleHandoverMs    *dist           `json:"idle_handover_ms"`
	BytesMoved        *int64          `json:"bytes_moved"`
	BytesVerified     *int64          `json:"bytes_verified"`
	BytesDiscarded    *int64          `json:"bytes_discarded"`
	CompletionS       *float64        `json:"completion_s"`
	Error             *runError       `json:"error"`
	LeakedBlocks      *int            `json:"leaked_blocks"`
	PinnedBlocksAtEnd *int            `json:"pinned_blocks_at_end"`
	Errors            []string        `json:"errors"`
	RankReports       json.RawMessage `json:"rank_reports"`
}

type runError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Ranks   []int  `json:"ranks"`
}

type dist struct {
	N   *int     `json:"n"`
	P50 *float64 `json:"p50"`
	P90 *float64 `json:"p90"`
	P99 *float64 `json:"p99"`
	Max *float64 `json:"max"`
}

type requestRecord struct {
	ID    uint64 `json:"id"`
	State string `json:"state"`
}

// readRequests reads a --requests-out file: one JSON record per line, in
// the order the requests finished; it returns them by ID.
func readRequests(t *testing.T, path string) []requestRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []requestRecord
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var q requestRecord
		require.NoError(t, json.Unmarshal([]byte(line), &q), "line %d: %q", i+1, line)
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b requestRecord) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// requireFields fails unless every field the tests rely on is present (a
// renamed JSON field decodes as nil, not as zero).
func requireFields(t *testing.T, r *runReport) {
	t.Helper()
	require.NotNil(t, r.RequestsCompleted, "requests_completed")
	require.NotNil(t, r.RequestsFailed, "requests_failed")
	require.NotNil(t, r.RequestsCancelled, "requests_cancelled")
	require.NotNil(t, r.ThroughputRPS, "throughput_rps")
	require.NotNil(t, r.BytesMoved, "bytes_moved")
	require.NotNil(t, r.BytesVerified, "bytes_verified")
	require.NotNil(t, r.BytesDiscarded, "bytes_discarded")
	require.NotNil(t, r.CompletionS, "completion_s")
	require.NotNil(t, r.LeakedBlocks, "leaked_blocks")
	require.NotNil(t, r.PinnedBlocksAtEnd, "pinned_blocks_at_end")
	require.NotNil(t, r.Errors, "errors must be an array, also when empty")
	for name, d := range map[string]*dist{"ttft_ms": r.TTFTMs, "idle_handover_ms": r.IdleHandoverMs} {
		require.NotNil(t, d, name)
		require.NotNil(t, d.N, name+".n")
		require.NotNil(t, d.P50, name+".p50")
		require.NotNil(t, d.P99, name+".p99")
		require.NotNil(t, d.Max, name+".max")
	}
}

// checkDist checks a distribution of n samples is ordered.
func checkDist(t *testing.T, name string, d *dist, n int) {
	t.Helper()
	assert.Equal(t, n, *d.N, "%s.n", name)
	if n == 0 {
		return
	}
	assert.Greater(t, *d.P50, 0.0, "%s.p50", name)
	assert.LessOrEqual(t, *d.P50, *d.P99, "%s: p50 <= p99", name)
	assert.LessOrEqual(t, *d.P99, *d.Max, "%s: p99 <= max", name)
}

// kvBytes is what the GEN side must verify for requests of tokens tokens
// each: every GEN rank receives its shard of every request (DP 1).
func kvBytes(t *testing.T, gen string, requests, tokens int) int64 {
	t.Helper()
	l := topology.MustParseLayout(gen)
	m := topology.DefaultModel()
	var per int64
	for r := range l.Ranks() {
		s, err := l.Shard(m, r)
		require.NoError(t, err)
		per += int64(s.BlockBytes()) * int64(s.BlocksFor(tokens))
	}
	return per * int64(requests)
}

func TestRunJSON(t *testing.T) {
	const n = 24
	reqs := filepath.Join(t.TempDir(), "requests.jsonl")
	code, out, errOut := cli(t, "run", "--ctx", "tp=1", "--gen", "tp=4", "--requests", strconv.Itoa(n), "--input", "256", "--checked", "--json",
		"--requests-out", reqs)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	var r runReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), "stdout is one JSON report:\n%s", out)
	requireFields(t, &r)
	assert.Equal(t, "tp=1", r.Ctx)
	assert.Equal(t, "tp=4", r.Gen)
	assert.Equal(t, 5, r.Ranks)
	assert.Equal(t, n, *r.RequestsCompleted)
	assert.Zero(t, *r.RequestsFailed)
	assert.Zero(t, *r.RequestsCancelled)
	assert.Zero(t, *r.LeakedBlocks)
	assert.Zero(t, *r.PinnedBlocksAtEnd)
	assert.Empty(t, r.Errors)
	// 8 layers x 8 heads x K,V x 64 x 2 bytes x 256 tokens per request, all
	// of it moved once and verified once.
	want := kvBytes(t, "tp=4", n, 256)
	assert.Equal(t, int64(n)*8*8*2*64*2*256, want)
	assert.Equal(t, want, *r.BytesVerified, "bytes_verified")
	assert.Equal(t, want, *r.BytesMoved, "bytes_moved")
	checkDist(t, "ttft_ms", r.TTFTMs, n)
	checkDist(t, "idle_handover_ms", r.IdleHandoverMs, *r.IdleHandoverMs.N)
	assert.LessOrEqual(t, *r.IdleHandoverMs.N, n)
	// Throughput is completed requests over the time to the last one, which
	// is within the run's duration.
	require.Greater(t, r.DurationS, 0.0)
	assert.Greater(t, *r.ThroughputRPS, 0.0)
	assert.GreaterOrEqual(t, *r.ThroughputRPS*r.DurationS, float64(n)*0.999, "throughput_rps x duration_s >= completed")
	assert.InDelta(t, float64(n), *r.ThroughputRPS**r.CompletionS, 1e-6, "throughput_rps x completion_s == completed")
	assert.LessOrEqual(t, *r.CompletionS, r.DurationS)
	assert.Nil(t, r.Error)
	assert.NotContains(t, out, `"requests":`, "per-request records go to --requests-out only")
	recs := readRequests(t, reqs)
	require.Len(t, recs, n)
	for i, q := range recs {
		assert.Equal(t, uint64(i+1), q.ID)
		assert.Equal(t, "completed", q.State, "request %d", q.ID)
	}
	// The per-rank reports come along, one per rank, without their traces.
	var ranks []map[string]any
	require.NoError(t, json.Unmarshal(r.RankReports, &ranks))
	require.Len(t, ranks, 5)
	for i, rr := range ranks {
		assert.EqualValues(t, i, rr["world_rank"])
		assert.NotContains(t, rr, "trace", "world rank %d", i)
	}
}

func TestRunJSONInjectedFailure(t *testing.T) {
	const n = 12
	reqs := filepath.Join(t.TempDir(), "requests.jsonl")
	code, out, errOut := cli(t, "run", "--requests", strconv.Itoa(n), "--checked", "--json", "--fault", "fail-transfer@gen:1,req=3",
		"--requests-out", reqs)
	var r runReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), "stdout (exit %d, stderr %s):\n%s", code, errOut, out)
	requireFields(t, &r)
	assert.Equal(t, n-1, *r.RequestsCompleted)
	assert.Equal(t, 1, *r.RequestsFailed)
	assert.Zero(t, *r.LeakedBlocks, "a failed request must free its blocks")
	assert.Zero(t, *r.PinnedBlocksAtEnd)
	checkDist(t, "ttft_ms", r.TTFTMs, n-1)
	recs := readRequests(t, reqs)
	require.Len(t, recs, n)
	assert.Equal(t, "failed", recs[2].State)
	// The failed request's bytes moved and were discarded, never verified.
	perRequest := kvBytes(t, "tp=4", 1, 256)
	assert.Equal(t, int64(n)*perRequest, *r.BytesMoved, "bytes_moved")
	assert.Equal(t, int64(n-1)*perRequest, *r.BytesVerified, "bytes_verified: of the completed requests only")
	assert.Equal(t, perRequest, *r.BytesDiscarded, "bytes_discarded: the failed request's")
}

func TestRunInjectedExitFails(t *testing.T) {
	code, out, errOut := cli(t, "run", "--requests", "8", "--json", "--fault", "exit@gen:1,req=3")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "injected fault")
	assert.NotContains(t, errOut, "goroutine ")
	// Still one JSON report: what was measured, and why it ended.
	var r runReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), "stdout is one JSON report:\n%s", out)
	require.NotNil(t, r.Error, "error object")
	assert.Equal(t, "injected", r.Error.Kind)
	assert.Contains(t, r.Error.Message, "gen rank 1 (world rank 2) exits on request 3")
	assert.Equal(t, []int{2}, r.Error.Ranks, "gen rank 1 is world rank 2")
	requireFields(t, &r)
	assert.Less(t, *r.RequestsCompleted, 8)
	var ranks []map[string]any
	require.NoError(t, json.Unmarshal(r.RankReports, &ranks))
	assert.Len(t, ranks, 5, "every rank's figures up to the error")
}

func TestRunTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	code, out, errOut := cli(t, "run", "--ctx", "tp=2", "--gen", "tp=2", "--requests", "8", "--trace", path)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	assert.Contains(t, out, "rankrun: ctx tp=2 -> gen tp=2")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var tr struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(b, &tr))
	require.NotEmpty(t, tr.TraceEvents)
	threads := map[float64]string{}
	complete := map[float64]int{}
	for i, ev := range tr.TraceEvents {
		for _, k := range []string{"name", "ph", "ts", "pid", "tid"} {
			require.Contains(t, ev, k, "event %d: %v", i, ev)
		}
		ph, _ := ev["ph"].(string)
		require.Contains(t, []string{"M", "X", "b", "e"}, ph, "event %d", i)
		_, ok := ev["ts"].(float64)
		require.True(t, ok, "event %d: ts is a number", i)
		tid := ev["tid"].(float64)
		switch {
		case ph == "M" && ev["name"] == "thread_name":
			_, dup := threads[tid]
			require.False(t, dup, "two thread_name events for tid %v", tid)
			args, _ := ev["args"].(map[string]any)
			threads[tid], _ = args["name"].(string)
		case ph == "X":
			d, ok := ev["dur"].(float64)
			require.True(t, ok && d >= 0, "event %d: dur", i)
			complete[tid]++
		}
	}
	require.Len(t, threads, 4, "one thread_name per rank")
	for tid := range 4 {
		assert.Contains(t, threads[float64(tid)], "rank", "tid %d", tid)
		assert.Positive(t, complete[float64(tid)], "rank %d has events", tid)
	}
	assert.Contains(t, threads[0], "ctx")
	assert.Contains(t, threads[3], "gen")
	requireNested(t, tr.TraceEvents)
}

// oneLine checks a usage failure: exit 2, one line on stderr naming the
// problem, nothing on stdout, no stack trace.
func oneLine(t *testing.T, code int, out, errOut string, want ...string) {
	t.Helper()
	assert.Equal(t, 2, code, "stderr: %s", errOut)
	assert.Empty(t, out)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line:\n%s", errOut)
	assert.True(t, strings.HasPrefix(errOut, "rankrun: "), "%q", errOut)
	for _, w := range want {
		assert.Contains(t, errOut, w)
	}
	assert.NotContains(t, errOut, "goroutine ")
	assert.NotContains(t, errOut, "panic")
}

func TestRunBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown flag", []string{"--bogus"}, []string{"-bogus", "not defined"}},
		{"bad flag value", []string{"--requests", "many"}, []string{"-requests"}},
		{"malformed layout", []string{"--ctx", "tp=0"}, []string{"--ctx", "tp", "positive integer"}},
		// Every model flag at its documented limit: the block's bytes
		// wrapped and checkSize divided by zero (a panic).
		{"block past an int64", []string{"--layers", "65536", "--kv-heads", "65536", "--head-dim", "65536", "--tokens-per-block", "65536"},
			[]string{"a KV block of the whole model", "7.379e+19 bytes", "1 TiB"}},
		{"arrivals past their span", []string{"--backend", "sim", "--arrival", "rate=1e-10", "--requests", "2"},
			[]string{"--arrival rate=1e-10 with --requests 2: they would arrive over 2e+10 s", "at least 2e-08 requests/s"}},
		// A binary without MPI refuses --backend mpi as a bad command line
		// (exit 2; it exited 1). The test binary is built without it.
		{"mpi in a build without it", []string{"--backend", "mpi"}, []string{"--backend mpi: this binary was built without MPI"}},
		// Past each backend's ranks, the way out named once.
		{"past local's ranks", []string{"--backend", "local", "--ctx", "tp=4096"},
			[]string{"the local backend runs at most 4096 in one process (the sim backend up to 65536; or run under mpirun)"}},
		{"past sim's ranks", []string{"--backend", "sim", "--ctx", "tp=65536"},
			[]string{"the sim backend runs at most 65536 in one process (or run under mpirun)"}},
		{"geometry does not divide", []string{"--gen", "tp=3"}, []string{"tp=3", "8 KV heads"}},
		{"ranks do not match", []string{"--ranks", "7"}, []string{"--ranks 7", "need 5"}},
		{"unwritable trace", []string{"--trace", "/nonexistent/dir/x.json"}, []string{"--trace", "/nonexistent/dir/x.json"}},
		{"unknown replay", []string{"--replay", "nope"}, []string{"--replay", `"nope"`, "unclamped-poll"}},
		{"malformed fault", []string{"--fault", "fail-transfer@gen"}, []string{"--fault", "ROLE:RANK"}},
		{"unknown fault", []string{"--fault", "melt@gen:1"}, []string{"--fault", `"melt"`}},
		{"fault outside the instance", []string{"--fault", "fail-transfer@gen:9,req=1"}, []string{"rank 9"}},
		{"bad arrival", []string{"--arrival", "sometimes"}, []string{"--arrival", "sometimes"}},
		{"bad backend", []string{"--backend", "carrier-pigeon"}, []string{"--backend"}},
		{"extra argument", []string{"extra"}, []string{`"extra"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, append([]string{"run", "--requests", "4"}, tc.args...)...)
			oneLine(t, code, out, errOut, tc.want...)
		})
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := cli(t, "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "rankrun sweep")
	for _, cmd := range []string{"run", "sweep", "scenario", "devices"} {
		t.Run(cmd, func(t *testing.T) {
			code, out, errOut := cli(t, cmd, "-h")
			assert.Equal(t, 0, code, "stderr: %s", errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, "Usage: rankrun "+cmd)
			assert.Contains(t, errOut, "Examples:\n  rankrun "+cmd)
		})
	}
	code, _, errOut := cli(t, "frobnicate")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `unknown command "frobnicate"`)
	code, _, _ = cli(t)
	assert.Equal(t, 2, code)
}

// A binary built without MPI that finds itself under mpirun must refuse,
// never run as rank 0 of a world of one.
func TestRefusesUnderMPIWithoutMPI(t *testing.T) {
	t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
	t.Setenv("PMIX_RANK", "0")
	for _, args := range [][]string{
		{"run", "--requests", "4"},
		{"run", "--requests", "4", "--backend", "local"},
		{"run", "--requests", "4", "--backend", "mpi"},
		{"sweep", "--requests", "4"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := cli(t, args...)
			assert.NotZero(t, code)
			assert.Empty(t, out, "nothing ran")
			assert.Contains(t, errOut, "mpirun")
			assert.Contains(t, errOut, "of 2")
			assert.NotContains(t, errOut, "goroutine ")
			assert.Equal(t, 1, strings.Count(errOut, "rankrun:"), "one line: %q", errOut)
		})
	}
}

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	csvPath, jsonPath, svgPath := filepath.Join(dir, "s.csv"), filepath.Join(dir, "s.json"), filepath.Join(dir, "s.svg")
	const n = 12
	code, out, errOut := cli(t, "sweep", "--requests", strconv.Itoa(n), "--checked",
		"--pair", "tp=1/tp=4", "--pair", "dp=2,adp/tp=2", "--pair", "tp=2,pp=2/tp=2",
		"--arrival", "closed=2", "--arrival", "burst",
		"--csv", csvPath, "--json", jsonPath, "--plot", svgPath)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	assert.Empty(t, errOut, "no progress bar when stderr is not a terminal")

	// The table: the workload every cell shares, a header and one row per
	// pair and workload.
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 2+6, out)
	assert.Equal(t, "sweep: 12 requests, 256 input tokens, 8 output tokens", lines[0])
	for _, col := range []string{"pair", "workload", "status", "completed/failed", "throughput rps", "per GPU rps", "TTFT p50 ms", "TTFT p99 ms",
		"TPOT p50 ms", "SLO met", "idle handover p99 ms", "peak KV ctx/gen", "bytes verified", "leaked blocks"} {
		assert.Contains(t, lines[1], col)
	}
	pairs := []string{"tp=1/tp=4", "dp=2,adp/tp=2", "tp=2,pp=2/tp=2"}
	for i, p := range pairs {
		for j, a := range []string{"closed=2", "burst"} {
			f := strings.Fields(lines[2+2*i+j])
			require.Len(t, f, 14, lines[2+2*i+j])
			assert.Equal(t, p, f[0])
			assert.Equal(t, a, f[1])
			assert.Equal(t, "ok", f[2])
			assert.Equal(t, strconv.Itoa(n)+"/0", f[3])
			assert.Equal(t, "0", f[13], "leaked blocks")
		}
	}
	assert.NotContains(t, out, "goodput", "no rate, no goodput")

	// CSV.
	fh, err := os.Open(csvPath)
	require.NoError(t, err)
	defer fh.Close()
	recs, err := csv.NewReader(fh).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 1+6)
	assert.Equal(t, sweepout.CSVHeader(), recs[0])
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for i, rec := range recs[1:] {
		p := pairs[i/2]
		assert.Equal(t, p, rec[col["ctx"]]+"/"+rec[col["gen"]])
		assert.Equal(t, strconv.Itoa(n), rec[col["requests_completed"]])
		assert.Equal(t, "0", rec[col["requests_failed"]])
		assert.Equal(t, "0", rec[col["leaked_blocks"]])
		assert.Empty(t, rec[col["error"]])
		bv, err := strconv.ParseInt(rec[col["bytes_verified"]], 10, 64)
		require.NoError(t, err)
		gen := rec[col["gen"]]
		assert.Equal(t, kvBytes(t, gen, n, 256), bv, "row %d", i+1)
		for _, k := range []string{"throughput_rps", "ttft_p50_ms", "ttft_p99_ms", "peak_kv_util_ctx", "peak_kv_util_gen"} {
			v, err := strconv.ParseFloat(rec[col[k]], 64)
			require.NoError(t, err, "row %d %s", i+1, k)
			assert.Positive(t, v, "row %d %s", i+1, k)
		}
	}

	// JSON: one report per run, no rank reports.
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var reps []runReport
	require.NoError(t, json.Unmarshal(b, &reps))
	require.Len(t, reps, 6)
	for i, r := range reps {
		requireFields(t, &r)
		assert.Equal(t, pairs[i/2], r.Ctx+"/"+r.Gen)
		assert.Equal(t, n, *r.RequestsCompleted)
		assert.Empty(t, r.RankReports, "run %d", i)
	}
	assert.NotContains(t, string(b), `"rank_reports"`)
	assert.NotContains(t, string(b), `"trace"`)

	// The plot.
	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	head := strings.TrimSpace(string(svg[:min(len(svg), 100)]))
	assert.True(t, strings.HasPrefix(head, "<?xml") || strings.HasPrefix(head, "<svg"), "%q", head)
	assert.Contains(t, string(svg), "</svg>")
}

func TestSweepPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.png")
	code, _, errOut := cli(t, "sweep", "--requests", "4", "--pair", "tp=1/tp=2", "--plot", path)
	require.Equal(t, 0, code, errOut)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")))
}

// A failing run still gets its row in every output, and the sweep exits 1.
func TestSweepFailureWritesWhatWasMeasured(t *testing.T) {
	dir := t.TempDir()
	csvPath, jsonPath := filepath.Join(dir, "s.csv"), filepath.Join(dir, "s.json")
	code, out, errOut := cli(t, "sweep", "--requests", "6", "--pair", "tp=1/tp=2", "--pair", "tp=2/tp=2",
		"--fault", "exit@gen:1,req=2", "--csv", csvPath, "--json", jsonPath)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "2 of 2 runs failed")
	assert.Contains(t, out, "error: tp=1/tp=2 closed=4:")
	assert.Contains(t, out, "injected fault")
	b, err := os.ReadFile(csvPath)
	require.NoError(t, err)
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 3)
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	assert.Contains(t, recs[1][col["error"]], "injected fault")
	assert.Equal(t, "failed", recs[1][col["status"]], "a failed cell is marked failed")
	assert.Contains(t, out, "FAILED")
	b, err = os.ReadFile(jsonPath)
	require.NoError(t, err)
	var reps []runReport
	require.NoError(t, json.Unmarshal(b, &reps))
	require.Len(t, reps, 2)
	assert.NotEmpty(t, reps[0].Errors)
}

func TestSweepBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no slash", []string{"--pair", "tp=1"}, []string{"--pair", "CTX/GEN"}},
		{"two slashes", []string{"--pair", "tp=1/tp=2/tp=4"}, []string{"--pair"}},
		{"malformed ctx", []string{"--pair", "tp=0/tp=1"}, []string{"--pair", "ctx", "tp"}},
		{"geometry", []string{"--pair", "tp=1/tp=3"}, []string{"tp=3", "KV heads"}},
		{"bad arrival", []string{"--arrival", "closed=0"}, []string{"closed=0"}},
		// The zero preset has no memory: it said no pair of 2 GPUs holds
		// the model, as if the model were too big.
		{"mpi", []string{"--backend", "mpi", "--pair", "tp=1/tp=1"}, []string{"sweep: --backend mpi: a sweep runs in this process"}},
		{"gpus on links-only hardware", []string{"--backend", "sim", "--model", "llama-3-8b", "--gpus", "2"},
			[]string{"--hardware zero has no compute figures"}},
		{"layout flag", []string{"--ctx", "tp=1"}, []string{"-ctx"}},
		{"unwritable csv", []string{"--csv", "/nonexistent/dir/x.csv"}, []string{"--csv", "/nonexistent/dir/x.csv"}},
		{"unwritable json", []string{"--json", "/nonexistent/dir/x.json"}, []string{"--json"}},
		{"plot extension", []string{"--plot", filepath.Join(dir, "x.pdf")}, []string{"--plot", ".svg or .png"}},
		{"same file twice", []string{"--csv", filepath.Join(dir, "a"), "--json", filepath.Join(dir, "a")}, []string{"--json", "--csv"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, append([]string{"sweep", "--requests", "4"}, tc.args...)...)
			oneLine(t, code, out, errOut, tc.want...)
		})
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "checking the outputs leaves no files behind")
}

// fakeNVML is an NVML with the given devices, or failing Init.
type fakeNVML struct {
	devs    []gpu.DeviceInfo
	initErr error
}

func (f *fakeNVML) Init() error               { return f.initErr }
func (f *fakeNVML) Shutdown() error           { return nil }
func (f *fakeNVML) DeviceCount() (int, error) { return len(f.devs), nil }
func (f *fakeNVML) Device(i int) (gpu.DeviceInfo, error) {
	if i < 0 || i >= len(f.devs) {
		return gpu.DeviceInfo{}, errors.New("no such device")
	}
	return f.devs[i], nil
}

func devicesCLI(t *testing.T, lib gpu.NVML, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := exitCode(devices(args, lib, &out, &errOut), &errOut)
	return code, out.String(), errOut.String()
}

func TestDevicesNoGPU(t *testing.T) {
	lib := &fakeNVML{initErr: errors.New("gpu: nvml: init: ERROR_LIBRARY_NOT_FOUND")}
	code, out, errOut := devicesCLI(t, lib, "--layout", "tp=2", "--host-bytes", "64MiB")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "no NVIDIA GPU: gpu: nvml: init: ERROR_LIBRARY_NOT_FOUND")
	assert.Contains(t, out, "fall back to host memory")
	// tp=2 of the default model: 4 heads x 8 layers x K,V x 16 tokens x 128 B.
	assert.Contains(t, out, "131072")
	assert.Contains(t, out, "512 ")

	code, out, errOut = devicesCLI(t, lib, "--layout", "tp=2", "--host-bytes", "64MiB", "--json")
	require.Equal(t, 0, code, errOut)
	var rep devicesReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.False(t, rep.NVMLAvailable)
	assert.Empty(t, rep.Devices)
	require.Len(t, rep.Ranks, 2)
	for i, r := range rep.Ranks {
		assert.Equal(t, i, r.LocalRank)
		assert.Nil(t, r.Device)
		assert.Equal(t, "host", r.Source)
		assert.Equal(t, 131072, r.BlockBytes)
		assert.Equal(t, 512, r.Blocks)
		assert.Equal(t, int64(64<<20), r.PoolBytes)
	}
}

func TestDevicesGPUs(t *testing.T) {
	lib := &fakeNVML{devs: []gpu.DeviceInfo{
		{Index: 0, Name: "NVIDIA H200", UUID: "GPU-0000", MemTotal: 140 << 30, MemFree: 100 << 30},
		{Index: 1, Name: "NVIDIA H200", UUID: "GPU-1111", MemTotal: 140 << 30, MemFree: 10 << 30},
	}}
	code, out, errOut := devicesCLI(t, lib, "--layout", "tp=4", "--fraction", "0.5", "--json")
	require.Equal(t, 0, code, errOut)
	var rep devicesReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.True(t, rep.NVMLAvailable)
	require.Len(t, rep.Devices, 2)
	assert.Equal(t, "GPU-1111", rep.Devices[1].UUID)
	require.Len(t, rep.Ranks, 4)
	const block = 2 * 8 * 2 * 16 * 128 // 2 heads, 8 layers, K and V, 16 tokens, 128 B
	for i, r := range rep.Ranks {
		require.NotNil(t, r.Device)
		assert.Equal(t, i%2, *r.Device, "local rank %d binds to device local rank mod 2", i)
		assert.Equal(t, "gpu", r.Source)
		assert.Equal(t, block, r.BlockBytes)
		free := lib.devs[i%2].MemFree
		assert.Equal(t, int(int64(0.5*float64(free))/block), r.Blocks)
	}
	code, out, _ = devicesCLI(t, lib, "--layout", "tp=4")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "NVML: 2 GPU(s)")
	assert.Contains(t, out, "GPU-0000")
	assert.Contains(t, out, "100.00 GiB")
	assert.Contains(t, out, "GPU 1")
}

func TestDevicesBadInput(t *testing.T) {
	lib := &fakeNVML{initErr: errors.New("no driver")}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"fraction", []string{"--fraction", "1.5"}, []string{"--fraction"}},
		{"host bytes", []string{"--host-bytes", "lots"}, []string{"--host-bytes"}},
		{"tiny pool", []string{"--host-bytes", "1KiB"}, []string{"--host-bytes", "blockBytes"}},
		{"layout", []string{"--layout", "tp=3"}, []string{"--layout", "tp=3"}},
		{"ranks", []string{"--ranks-per-node", "-1"}, []string{"--ranks-per-node"}},
		// A layout of more ranks than a node names --layout, not the
		// --ranks-per-node the user never gave.
		{"layout past a node", []string{"--layout", "tp=100000"}, []string{"--layout tp=100000: 100000 ranks, more than a node's 4096"}},
		// The model flags' product past a Duration-sized block (it
		// panicked in run): refused in one line.
		{"block overflow", []string{"--layers", "65536", "--kv-heads", "65536", "--head-dim", "65536", "--tokens-per-block", "65536"},
			[]string{"a KV block of the whole model", "must be at most 1099511627776 (1 TiB)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := devicesCLI(t, lib, tc.args...)
			oneLine(t, code, out, errOut, tc.want...)
		})
	}
}

// The real NVML on whatever machine runs the tests: a GPU list or the
// fallback, never a crash (NVML functions after a failed Init kill the
// process).
func TestDevicesRealNVML(t *testing.T) {
	code, out, errOut := cli(t, "devices", "--host-bytes", "16MiB")
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(out, "NVML: ") || strings.HasPrefix(out, "no NVIDIA GPU: "), out)
	if !gpu.Built { // a plain go build: the line says how to get the real one
		assert.Contains(t, out, "built without NVML (rebuild with -tags nvml; make build does)")
	}
}

// Checked collectives are the default; --unchecked (or --checked=false)
// turns them off, and the report says which ran, with the verify mode.
func TestCheckedIsTheDefault(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		checked bool
		verify  string
	}{
		{nil, true, "full"},
		{[]string{"--unchecked"}, false, "full"},
		{[]string{"--checked=false"}, false, "full"},
		{[]string{"--verify", "checksum"}, true, "checksum"},
		{[]string{"--unchecked", "--verify", "off"}, false, "off"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := cli(t, append([]string{"run", "--requests", "8", "--json"}, tc.args...)...)
			require.Equal(t, 0, code, errOut)
			var rep struct {
				Checked       *bool  `json:"checked"`
				Verify        string `json:"verify"`
				BytesVerified int64  `json:"bytes_verified"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			require.NotNil(t, rep.Checked, "the report has no checked field")
			require.Equal(t, tc.checked, *rep.Checked)
			require.Equal(t, tc.verify, rep.Verify)
			if tc.verify == "off" {
				require.Zero(t, rep.BytesVerified)
			} else {
				require.Positive(t, rep.BytesVerified)
			}
		})
	}
}

// On a terminal a run shows the requests finished (count, rate, ETA);
// piped, nothing. The records it counts still reach --requests-out.
func TestRunProgress(t *testing.T) {
	var out bytes.Buffer
	var bar *progressbar.ProgressBar
	real := newProgressBar
	t.Cleanup(func() { newProgressBar = real })
	newProgressBar = func(what string, n int, _ io.Writer) *progressbar.ProgressBar {
		bar = progressBarOn(what, n, &out) // a terminal, for the test
		return bar
	}
	reqs := filepath.Join(t.TempDir(), "requests.jsonl")
	code, _, errOut := cli(t, "run", "--requests", "30", "--requests-out", reqs)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out.String(), "run  50% |", "drawn as it goes")
	assert.Regexp(t, `\(15/30, [0-9.]+ req/s\)`, out.String(), "the count and the rate, as the README says")
	assert.Equal(t, progressbar.State{Max: 30, CurrentNum: 30}, progressbar.State{Max: bar.State().Max, CurrentNum: bar.State().CurrentNum},
		"every finished request counted")
	assert.Len(t, readRequests(t, reqs), 30)
	code, _, errOut = cli(t, "run", "--backend", "sim", "--requests", "12", "--gen", "tp=2,dp=2")
	require.Equal(t, 0, code, errOut)
	assert.EqualValues(t, 12, bar.State().CurrentNum, "two GEN instances, each leader counting its own")
}
