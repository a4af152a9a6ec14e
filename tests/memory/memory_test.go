//go:build memory

package memory

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bin is make build's binary, built by TestMain.
var bin string

func TestMain(m *testing.M) {
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(1)
	}
	if os.Getenv("CGO_CFLAGS") == "" {
		os.Setenv("CGO_CFLAGS", "-O2 -g -Wno-deprecated-declarations") // go-nvml's header (-tags nvml)
	}
	bin = filepath.Join(root, "bin", "rankrun")
	cmd := exec.Command("go", "build", "-tags", "nvml", "-o", bin, "./cmd/rankrun")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "memory: go build -tags nvml: %v\n%s", err, out)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// peakRSS runs bin with args (a --json run) to the end, within ten
// minutes, and returns the peak RSS its report gives; it fails the test
// unless the run exits 0, or past budget.
func peakRSS(t *testing.T, budget int64, args ...string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "%s", tail(errb.String()))
	var rep struct {
		PeakRSS *int64 `json:"wall_peak_rss_bytes"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), "the report is not JSON")
	require.NotNil(t, rep.PeakRSS, "no wall_peak_rss_bytes in the report")
	rss := *rep.PeakRSS
	require.Positive(t, rss, "wall_peak_rss_bytes is 0")
	t.Logf("peak RSS %d MiB (budget %d MiB)", rss>>20, budget>>20)
	assert.LessOrEqual(t, rss, budget, "peak RSS over its budget")
	return rss
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

// A run's trace events and request records stream to their files: 50,000
// requests fit 128 MiB, and both files are whole.
func TestStreamsKeepARunsMemoryFlat(t *testing.T) {
	const n = 50000
	dir := t.TempDir()
	trace, records := filepath.Join(dir, "trace.json"), filepath.Join(dir, "requests.jsonl")
	peakRSS(t, 128<<20, "run", "--requests", strconv.Itoa(n), "--layers", "1", "--kv-heads", "1", "--head-dim", "8", "--json",
		"--trace", trace, "--requests-out", records)

	f, err := os.Open(records)
	require.NoError(t, err)
	defer f.Close()
	ids := map[int]int{}
	lines := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		var r struct {
			ID *int `json:"id"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "record %d: %q", lines, sc.Text())
		require.NotNil(t, r.ID, "record %d has no id", lines)
		ids[*r.ID]++
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, n, lines, "records in --requests-out")
	assert.Len(t, ids, n, "distinct request ids in --requests-out")

	tr, err := os.ReadFile(trace)
	require.NoError(t, err)
	assert.True(t, bytes.Contains(tr[:min(len(tr), 40)], []byte(`"traceEvents":[`)), "the trace opens with traceEvents: %q", tr[:min(len(tr), 40)])
	assert.True(t, bytes.HasSuffix(tr, []byte("]}")) || bytes.HasSuffix(tr, []byte("]}\n")), "the trace is closed")
	assert.Equal(t, 5, bytes.Count(tr, []byte(`"thread_name"`)), "one track name per rank")
}

// A 2048-rank simulation (dp=1024 each side) of 4096 requests fits 1.5 GiB.
func TestAThousandRanksASideFitTheirBudget(t *testing.T) {
	peakRSS(t, 1536<<20, "run", "--backend", "sim", "--ctx", "dp=1024", "--gen", "dp=1024", "--requests", "4096",
		"--layers", "1", "--kv-heads", "1", "--head-dim", "8", "--json")
}
