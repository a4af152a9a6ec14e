package main

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/scenario"
)

// A report's size does not grow with the run: 8x the requests (and the
// iterations) leave the JSON report within 2x (raw per-iteration samples
// made it grow 8x; the 1,000,000-request runs are in
// scripts/test-cli-scale.sh).
func TestReportSizeIndependentOfRunLength(t *testing.T) {
	size := map[int]int{}
	for _, n := range []int{500, 4000} {
		code, out, errOut := cli(t, "run", "--requests", strconv.Itoa(n), "--layers", "1", "--kv-heads", "1", "--head-dim", "8", "--json")
		require.Equal(t, 0, code, errOut)
		var r runReport
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		require.Equal(t, n, *r.RequestsCompleted)
		require.Equal(t, n, *r.TTFTMs.N)
		size[n] = len(out)
	}
	t.Logf("report bytes: %v", size)
	assert.Less(t, float64(size[4000])/float64(size[500]), 2.0, "report bytes %v", size)
}

// A run that reaches --timeout ends with its partial report, naming the flag.
func TestRunTimeoutReport(t *testing.T) {
	code, out, errOut := cli(t, "run", "--requests", "64", "--output", "50", "--decode-per-step", "20ms", "--timeout", "400ms", "--json")
	assert.Equal(t, 1, code, errOut)
	var r runReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), "stdout is one JSON report:\n%s", out)
	require.NotNil(t, r.Error)
	assert.Equal(t, "timeout", r.Error.Kind)
	assert.Contains(t, r.Error.Message, "--timeout 400ms")
	assert.Contains(t, errOut, "--timeout")
}

// A run that ended early (here the seed-001 stall: no-idle-reap on a
// single-rank sync CTX) reports the blocks it still held as in use when it
// stopped, not as leaked, and says its error once in the text report.
func TestEarlyEndIsInUseNotLeaked(t *testing.T) {
	s, err := scenario.ParseFile(filepath.Join(repoRoot, "tests/multirank/testdata/replay-no-idle-reap.txt"))
	require.NoError(t, err)
	args := append([]string{"run"}, s.RunArgs(true)...)
	args = append(args, "--backend", "sim")
	code, out, errOut := cli(t, append(args, "--json")...)
	require.Equal(t, 1, code, errOut)
	var r struct {
		runReport
		InUse  int      `json:"in_use_blocks_at_end"`
		Errors []string `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.NotNil(t, r.Error)
	assert.Equal(t, "stalled", r.Error.Kind)
	assert.Equal(t, 0, *r.LeakedBlocks, "a run cut short leaks nothing: its blocks were in use")
	assert.Equal(t, 16, r.InUse, "the CTX pool's 16 blocks, pinned by the stall")
	for _, e := range r.Errors {
		assert.NotContains(t, e, "still allocated")
	}

	code, text, _ := cli(t, args...)
	require.Equal(t, 1, code)
	assert.Equal(t, 1, strings.Count(text, "executor: stalled"), "the error once in the report:\n%s", text)
	assert.Contains(t, text, "leaked blocks                     0 (in use when the run ended early: 16, pinned: 16)")

	// A run that ran to its end still counts what it left as leaked.
	code, out, errOut = cli(t, "run", "--requests", "2", "--json")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Zero(t, r.InUse)
}
