package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/internal/goodputout"
)

// A CTX that prefills 64-token prompts at 1 ms a token serves at most
// 1000/64 = 15.6 requests/s: the goodput lies below that, bracketed to
// the tolerance, every probe at or below it met the SLO and the lowest
// above it did not. Virtual time: the same figures on any host.
func TestGoodputCommand(t *testing.T) {
	args := []string{"goodput", "--ctx", "tp=1", "--gen", "tp=1", "--requests", "60", "--input", "64", "--output", "8",
		"--prefill-per-token", "1ms", "--decode-per-step", "2ms", "--slo-ttft", "500ms", "--tol", "0.1"}
	code, out, errOut := cli(t, append(args, "--json")...)
	require.Equal(t, 0, code, errOut)
	var g goodputout.Report
	require.NoError(t, json.Unmarshal([]byte(out), &g), out)
	assert.Equal(t, 2, g.GPUs)
	assert.Equal(t, 60, g.Requests)
	assert.Greater(t, g.Goodput, 8.0)
	assert.LessOrEqual(t, g.Goodput, 1000.0/64, "no more than the CTX can prefill")
	assert.Greater(t, g.Above, g.Goodput)
	assert.LessOrEqual(t, g.Above/g.Goodput, 1.1+1e-9, "bracketed to --tol")
	assert.Contains(t, g.Why, "bracketed within 0.1")
	assert.InDelta(t, g.Goodput/2, g.PerGPU, 1e-12)
	for _, p := range g.Probes {
		assert.Equal(t, p.Rate <= g.Goodput, p.Pass, "probe at %g", p.Rate)
		assert.Equal(t, p.Share >= 0.9, p.Pass)
		assert.LessOrEqual(t, p.Interval[0], p.Share)
		assert.GreaterOrEqual(t, p.Interval[1], p.Share)
		assert.Equal(t, 60, p.N)
	}
	// The text names the goodput and the confidence this n gives.
	code, out, errOut = cli(t, args...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "goodput of ctx tp=1 -> gen tp=1 (2 GPUs)")
	assert.Contains(t, out, "confidence: with 60 requests a probe, an attainment of 90% has a 95% interval of +-7.7%; +-2% needs 865")
	// The README shows this run's output (virtual time: these figures exactly).
	assert.Contains(t, out, "goodput: 13.45 requests/s (6.727 per GPU); bracketed within 0.1: the goodput lies in [13.45, 14.67) requests/s")
}

func TestGoodputBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--rate-lo", "0"}, []string{"--rate-lo 0: must be positive"}},
		{[]string{"--rate-lo", "NaN"}, []string{"--rate-lo NaN: must be positive"}},
		{[]string{"--rate-lo", "5", "--rate-hi", "2"}, []string{"--rate-hi 2: must be above --rate-lo (5)"}},
		{[]string{"--rate-hi", "inf"}, []string{"--rate-hi +Inf: at most 1e7 requests/s"}},
		// A rate whose 4 requests would arrive over 4e300 s: it ended in an
		// internal error mid-search (a negative probe deadline).
		{[]string{"--rate-lo", "1e-300", "--rate-hi", "1e-299"}, []string{"--rate-lo 1e-300: at least 4e-08 requests/s for --requests 4"}},
		{[]string{"--slo-share", "2"}, []string{"--slo-share 2: must be in (0, 1]"}},
		{[]string{"--slo-ttft", "0s"}, []string{"--slo-ttft 0s: must be positive"}},
		{[]string{"--slo-tpot", "-1s"}, []string{"--slo-tpot -1s: must be positive"}},
		{[]string{"--tol", "1"}, []string{"--tol 1: must be in (0, 1)"}},
		{[]string{"--max-probes", "1"}, []string{"--max-probes 1: must be at least 2"}},
		// Refused for what it is on any build (a build without MPI was
		// told to rebuild with it).
		{[]string{"--backend", "mpi"}, []string{"goodput: --backend mpi: the search runs its probes in this process"}},
		{[]string{"--ctx", "tp=0"}, []string{"--ctx"}},
		{[]string{"--arrival", "closed=1"}, []string{"-arrival"}}, // the search sets the arrival rate
	} {
		code, out, errOut := cli(t, append([]string{"goodput", "--requests", "4"}, c.args...)...)
		oneLine(t, code, out, errOut, c.want...)
	}
}

// A probe is a run whose requests take requests/rate to arrive: at a low
// rate that passes the run's default 10 minutes, which must not end the
// search (the probe's deadline grows with it). Here no rate meets a 10 ms
// TTFT, so the search halves --rate-lo down to 1/64 request/s: 60 requests
// over an hour of virtual time.
func TestGoodputLowRatesOutlastTheDefaultDeadline(t *testing.T) {
	withoutRace(t, "test-perf")
	code, out, errOut := cli(t, "goodput", "--ctx", "tp=1", "--gen", "tp=1", "--requests", "60", "--input", "64", "--output", "8",
		"--prefill-per-token", "1ms", "--decode-per-step", "2ms", "--slo-ttft", "10ms", "--json")
	require.Equal(t, 0, code, errOut)
	var g goodputout.Report
	require.NoError(t, json.Unmarshal([]byte(out), &g), out)
	assert.Zero(t, g.Goodput)
	assert.Equal(t, "no rate down to 0.015625 requests/s meets the SLO", g.Why)
	assert.Len(t, g.Probes, 7)
}

// Requests an overloaded rate fails or cancels count as missing the SLO;
// they do not end the search.
func TestGoodputOverloadFailsTheRate(t *testing.T) {
	code, out, errOut := cli(t, "goodput", "--ctx", "tp=1", "--gen", "tp=1", "--requests", "40", "--input", "64", "--output", "16",
		"--prefill-per-token", "10us", "--decode-per-step", "20ms", "--gen-blocks", "16", "--transfer-timeout", "200ms",
		"--slo-ttft", "2s", "--slo-tpot", "100ms", "--rate-hi", "100", "--json")
	require.Equal(t, 0, code, errOut)
	var g goodputout.Report
	require.NoError(t, json.Unmarshal([]byte(out), &g), out)
	assert.Contains(t, g.Why, "bracketed")
	assert.Positive(t, g.Goodput)
}
