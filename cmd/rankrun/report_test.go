package main

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
