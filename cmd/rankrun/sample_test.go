package main

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A sim run with --model and no --kv-sample carries one element of each
// head, says so in the report, and reports
// exactly the virtual-time figures of the run that carries every byte:
// the links are charged for all of them.
func TestRunSamplesByDefault(t *testing.T) {
	args := []string{"run", "--backend", "sim", "--model", "llama-3-8b", "--hardware", "h100", "--json",
		"--ctx", "tp=1", "--gen", "tp=2", "--requests", "2", "--input", "512", "--output", "4", "--arrival", "closed=1"}
	run := func(extra ...string) (modelReport, string) {
		t.Helper()
		return runWithRecords(t, append(append([]string{}, args...), extra...)...)
	}
	full, fullRecords := run("--kv-sample", "1")
	assert.NotContains(t, full.Compute, "KV sampled", "--kv-sample 1: every byte")

	// runspec's tests hold that the sample is this one whatever the host.
	small, smallRecords := run()
	require.Contains(t, small.Compute, "KV sampled 1/128 (links charged for every byte); the default sample: one element of each head proves where every (request, block, layer, K/V, head, token) lands (--kv-sample 1 carries every byte)")
	const n = 128
	assert.Equal(t, n, small.KVSample, "the sample, as a field: the byte counts are 1/kv_sample of the full run's")
	assert.Equal(t, 1, full.KVSample)
	assert.Equal(t, full.TTFTMs, small.TTFTMs, "virtual time does not depend on the sample")
	assert.Equal(t, full.ThroughputRPS, small.ThroughputRPS)
	// Every request's record, to the nanosecond; only the bytes carried
	// (and verified) are the sample's.
	carried := regexp.MustCompile(`"(bytes|verified_bytes)":(\d+)`)
	for _, b := range carried.FindAllStringSubmatch(smallRecords, -1) {
		k, err := strconv.Atoi(b[2])
		require.NoError(t, err)
		assert.Contains(t, fullRecords, `"`+b[1]+`":`+strconv.Itoa(k*n), "1/%d of the bytes", n)
	}
	require.NotEmpty(t, carried.FindAllString(smallRecords, -1))
	strip := func(s string) string { return carried.ReplaceAllString(s, `"$1":_`) }
	assert.Equal(t, strip(fullRecords), strip(smallRecords), "every request's timeline, to the nanosecond")
}
