package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/topology"
)

// The README's cost-model example (llama-3-70b, ctx tp=4, gen tp=4, 64
// requests of 1024+64 tokens) has pools of 42.50 GiB in one process. On the
// 23.54 GiB host the issue was found on, the least sample that keeps them
// within half the host is 1/4; on a host of 128 GiB it carries every byte.
func TestFitSampleREADMEExample(t *testing.T) {
	full := costmodel.Models["llama-3-70b"].Geometry(topology.DefaultModel().TokensPerBlock)
	c := &executor.Config{Ctx: topology.MustParseLayout("tp=4"), Gen: topology.MustParseLayout("tp=4"), CtxBlocks: 4352, GenBlocks: 4352}
	require.Equal(t, "42.50 GiB", executor.FormatBytes(poolBytes(c, full)), "the figure the issue reports")
	host := int64(25275027456) // 23.54 GiB
	n, ok := fitSample(c, full, host/2)
	require.True(t, ok)
	assert.Equal(t, 4, n, "1/2 is 21.25 GiB, over half of 23.54 GiB; 1/4 is 10.63 GiB")
	n, ok = fitSample(c, full, 64<<30)
	require.True(t, ok)
	assert.Equal(t, 1, n, "a host with room carries every byte")
	_, ok = fitSample(c, full, 1<<20)
	assert.False(t, ok, "no sample fits 1 MiB: say so, do not pick one")
	_, ok = fitSample(c, full, 0)
	assert.False(t, ok, "unknown host memory: no choice")
}

// On a host too small for the full pools, a sim run with --model and no
// --kv-sample samples the KV heads, says so in the report with the reason,
// and reports exactly the virtual-time figures of the run that carries
// every byte: the links are charged for all of them.
func TestRunSamplesToFitTheHost(t *testing.T) {
	args := []string{"run", "--backend", "sim", "--model", "llama-3-8b", "--hardware", "h100", "--json",
		"--ctx", "tp=1", "--gen", "tp=2", "--requests", "2", "--input", "512", "--output", "4", "--arrival", "closed=1"}
	run := func(extra ...string) (modelReport, string) {
		t.Helper()
		return runWithRecords(t, append(append([]string{}, args...), extra...)...)
	}
	full, fullRecords := run("--kv-sample", "1")
	assert.NotContains(t, full.Compute, "KV sampled", "a host with room: every byte")

	real := hostMemory
	t.Cleanup(func() { hostMemory = real })
	hostMemory = func() int64 { return 64 << 20 }
	small, smallRecords := run()
	m := regexp.MustCompile(`KV sampled 1/(\d+) \(links charged for every byte\); sampled because the full pools \(([^)]*) in this process\) exceed half this host's 64.00 MiB of memory \(--kv-sample 1 carries every byte\)`).
		FindStringSubmatch(small.Compute)
	require.NotNil(t, m, "compute line: %s", small.Compute)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	assert.Greater(t, n, 1)
	t.Logf("64 MiB host: full pools %s, sampled 1/%d", m[2], n)
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

	// The local backend cannot sample: it refuses, naming the way out.
	local := append([]string{}, args...)
	local[2] = "local"
	code, _, errOut := cli(t, local...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "more than this host's 64.00 MiB of memory")
	assert.Contains(t, errOut, "--backend sim samples the KV heads to fit")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %s", errOut)
	// A host too small even for one element of each head: said so, with
	// what to change, and nothing run.
	hostMemory = func() int64 { return 1 << 20 }
	code, _, errOut = cli(t, args...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "even with one element of each head (--kv-sample 128), more than half this host's 1.00 MiB")
	hostMemory = func() int64 { return 64 << 20 }
	// An explicit --kv-sample is the user's choice: never overridden.
	code, _, errOut = cli(t, append(append([]string{}, args...), "--kv-sample", "1")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "more than this host's 64.00 MiB of memory")
}
