package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/topology"
)

// The default sample under sim is one element of each head, two where an
// element is one byte (a value of one byte tells only 256 places apart),
// whatever the host: the fewest that divide the head.
func TestDefaultSample(t *testing.T) {
	for _, tc := range []struct {
		name          string
		headDim, elem int
		want          int
	}{
		{"llama-3-70b", costmodel.Models["llama-3-70b"].Geometry(16).HeadDim, 2, 128},
		{"deepseek-r1's MLA half", costmodel.Models["deepseek-r1"].Geometry(16).HeadDim, 2, 288},
		{"fp8 cache", 128, 1, 64},
		{"fp8, one element", 1, 1, 1},
		{"fp8, odd head", 3, 1, 1},
		{"fp32", 64, 4, 64},
	} {
		g := topology.Model{Layers: 2, KVHeads: 2, HeadDim: tc.headDim, TokensPerBlock: 16, ElemBytes: tc.elem}
		assert.Equal(t, tc.want, defaultSample(g), tc.name)
	}
}

// A sim run with --model and no --kv-sample carries one element of each
// head, whatever the host's memory, says so in the report, and reports
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

	real := hostMemory
	t.Cleanup(func() { hostMemory = real })
	for _, host := range []int64{64 << 20, 64 << 30} {
		hostMemory = func() int64 { return host }
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

	// The local backend cannot sample: it refuses, naming the way out.
	hostMemory = func() int64 { return 64 << 20 }
	local := append([]string{}, args...)
	local[2] = "local"
	code, _, errOut := cli(t, local...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "more than this host's 64.00 MiB of memory")
	assert.Contains(t, errOut, "--backend sim samples the KV heads to fit")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %s", errOut)
	// A host too small even for the default sample: said so, with what
	// to change, and nothing run.
	hostMemory = func() int64 { return 1 << 20 }
	code, _, errOut = cli(t, args...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "even with the default sample of each head (--kv-sample 128), more than half this host's 1.00 MiB")
	hostMemory = func() int64 { return 64 << 20 }
	// An explicit --kv-sample is the user's choice: never overridden.
	code, _, errOut = cli(t, append(append([]string{}, args...), "--kv-sample", "1")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "more than this host's 64.00 MiB of memory")
}
