package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	var g goodputOut
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
		{[]string{"--rate-lo", "0"}, []string{"want 0 < lo < hi"}},
		{[]string{"--rate-lo", "5", "--rate-hi", "2"}, []string{"lo 5, hi 2"}},
		{[]string{"--slo-share", "2"}, []string{"SLO share = 2", "(0, 1]"}},
		{[]string{"--slo-ttft", "0s"}, []string{"SLO TTFT = 0s"}},
		{[]string{"--tol", "1"}, []string{"relative tolerance 1"}},
		{[]string{"--backend", "mpi"}, []string{"--backend mpi"}},
		{[]string{"--ctx", "tp=0"}, []string{"--ctx"}},
	} {
		code, out, errOut := cli(t, append([]string{"goodput", "--requests", "4"}, c.args...)...)
		oneLine(t, code, out, errOut, c.want...)
	}
}
