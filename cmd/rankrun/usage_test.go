package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/costmodel"
)

// Every flag's documented 0 means what -h says: --compute-eff 0 and
// --memory-eff 0 are the hardware's figures, the same run as without them.
func TestEfficiencyZeroIsTheHardwares(t *testing.T) {
	base := []string{"run", "--backend", "sim", "--model", "llama-3-8b", "--hardware", "h100", "--kv-sample", "32",
		"--requests", "2", "--input", "64", "--output", "2", "--json"}
	code, want, errOut := cli(t, base...)
	require.Equal(t, 0, code, errOut)
	code, got, errOut := cli(t, append(append([]string{}, base...), "--compute-eff", "0", "--memory-eff", "0")...)
	require.Equal(t, 0, code, errOut)
	var a, b modelReport
	require.NoError(t, json.Unmarshal([]byte(want), &a))
	require.NoError(t, json.Unmarshal([]byte(got), &b))
	assert.Equal(t, a.Compute, b.Compute)
	assert.Contains(t, b.Compute, fmt.Sprintf("at %.0f%%", 100*costmodel.DefaultComputeEff), "the hardware's compute_eff")
	assert.Equal(t, a.TTFTMs, b.TTFTMs)
	code, _, errOut = cli(t, append(append([]string{}, base...), "--memory-eff", "-0.5")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--memory-eff -0.5: must be in [0.01, 1] (or 0 for the hardware's)")
}

// `rankrun version` and `--version` print one line: the binary's version
// and Go toolchain.
func TestVersion(t *testing.T) {
	for _, a := range []string{"version", "--version"} {
		code, out, errOut := cli(t, a)
		require.Equal(t, 0, code, errOut)
		assert.Regexp(t, `^rankrun \S+.* go1\.\d+`, out)
		assert.Equal(t, 1, strings.Count(out, "\n"), out)
	}
	_, _, unknown := cli(t, "foo")
	assert.Contains(t, unknown, "or version")
}

// With --json, a refused command line is the report's error object on
// stdout (kind "usage"), as a run-time error is; the line on stderr stays.
// Without --json, stdout stays empty.
func TestRunJSONUsageError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"run", "--json", "--requests", "0"}, "--requests 0: must be at least 1"},
		{[]string{"run", "--requests", "0", "-json=true"}, "--requests 0: must be at least 1"},
		{[]string{"run", "--json", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"run", "--json", "--ctx", "tp=0"}, "--ctx"},
	} {
		code, out, errOut := cli(t, tc.args...)
		assert.Equal(t, 2, code, "%v", tc.args)
		var r runReport
		require.NoError(t, json.Unmarshal([]byte(out), &r), "%v: stdout %q", tc.args, out)
		require.NotNil(t, r.Error, "%v", tc.args)
		assert.Equal(t, "usage", r.Error.Kind)
		assert.Contains(t, r.Error.Message, tc.msg)
		assert.Contains(t, errOut, tc.msg)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line on stderr: %s", errOut)
	}
	code, out, _ := cli(t, "run", "--requests", "0")
	assert.Equal(t, 2, code)
	assert.Empty(t, out, "no --json: nothing on stdout")
	code, out, _ = cli(t, "run", "--json=false", "--requests", "0")
	assert.Equal(t, 2, code)
	assert.Empty(t, out, "--json=false")
	// What the flag parser read decides: --json taken as another flag's
	// value, or set and then unset, is no --json.
	for _, args := range [][]string{{"run", "--trace", "--json", "--requests", "0"}, {"run", "--json", "--json=false", "--requests", "0"}} {
		code, out, _ = cli(t, args...)
		assert.Equal(t, 2, code)
		assert.Empty(t, out, "%v", args)
	}
}

// Output files get the mode os.Create gives (0666 less the umask), not
// 0600 as os.CreateTemp's would.
func TestOutputFilesAreReadable(t *testing.T) {
	mask := syscall.Umask(0o022)
	defer syscall.Umask(mask)
	dir := t.TempDir()
	records := filepath.Join(dir, "requests.jsonl")
	code, _, errOut := cli(t, "run", "--requests", "2", "--requests-out", records)
	require.Equal(t, 0, code, errOut)
	st, err := os.Stat(records)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
}

// Refusals come up front, with exit 2: explore runs only in simulation,
// its expectations must name an outcome (a bound alone would judge every
// run as a failure to fail), and bench's request counts are checked
// before it measures anything.
func TestRefusedUpFront(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"explore", "--backend", "local"}, "--backend local: explore runs every schedule in the simulation backend"},
		{[]string{"explore", "--backend", "mpi"}, "--backend mpi: explore runs every schedule in the simulation backend"},
		{[]string{"explore", "--expect", "completed == 99"}, "--expect: no outcome: one line must be ok or error NAME"},
		{[]string{"explore", "--expect", "error ErrStalled", "--expect", "completed == 3"}, `--expect: bound "completed == 3" on a run expected to fail`},
		{[]string{"run", "--strategy", "bogus"}, `--strategy: sim: strategy "bogus": must be random or pct`},
		{[]string{"sweep", "--strategy", "bogus"}, `--strategy: sim: strategy "bogus": must be random or pct`},
		{[]string{"sweep", "--arrival", "poisson=2,,poisson=4"}, `--arrival "poisson=2,,poisson=4": item 2 is empty (a stray comma?)`},
		{[]string{"analyze", "/nonexistent-dumps"}, "open /nonexistent-dumps: no such file or directory"},
		{[]string{"explore", "--start", "0"}, "--start 0: must be at least 1 (schedule seeds start at 1)"},
		{[]string{"explore", "--pct-depth", "0"}, "--pct-depth 0: must be at least 1"},
		{[]string{"explore", "--msg-jitter", "-1ms"}, "--msg-jitter -1ms: must not be negative"},
		{[]string{"run", "--gen", "dp=2,ep=2,adp"}, "without --model there are none: give an MoE --model (deepseek-r1-fp4, gpt-oss-120b, ...), synthetic --experts E/K, or drop ep"},
		{[]string{"run", "--gen", "dp=2,ep=2,adp", "--experts", "8"}, `--experts: topology: invalid model: experts "8": want E/K`},
		{[]string{"run", "--gen", "dp=2,ep=2,adp", "--experts", "8/9"}, "--experts: topology: invalid model: routing: experts per token = 9: must be in [1, experts (8)]"},
		{[]string{"run", "--model", "gpt-oss-120b", "--experts", "8/2"}, "--experts: the model defines its experts; drop --experts or --model"},
		// A scenario file is the run: a run flag beside it was ignored and
		// the search said "no failure" on the file's own run.
		{[]string{"explore", "--scenario", "../../tests/multirank/testdata/fault-cancel-gen.txt", "--ctx", "tp=0", "--replay", "unclamped-poll", "--seeds", "2"},
			"--ctx, --replay: --scenario ../../tests/multirank/testdata/fault-cancel-gen.txt is the run, as the file writes it; drop them"},
		{[]string{"explore", "--scenario", "../../tests/multirank/testdata/fault-cancel-gen.txt", "--expect", "ok"}, "--expect: --scenario"},
		// Flags of another mode were ignored, the scenario run as given.
		{[]string{"scenario", "--out", "/tmp/gen", "../../tests/multirank/testdata/fault-cancel-gen.txt"}, "--out /tmp/gen: applies to --generate"},
		{[]string{"scenario", "--with-replay", "../../tests/multirank/testdata/fault-cancel-gen.txt"}, "--with-replay applies to --print-run"},
		{[]string{"explore", "--start", "18446744073709551615", "--seeds", "3"}, "--start 18446744073709551615: with --seeds 3 the seeds would pass 2^64-1 and wrap to 0"},
		{[]string{"bench", "--raw", "", "--json", "", "--cp-requests", "-1"}, "--cp-requests -1: must be at least 1"},
		{[]string{"bench", "--raw", "", "--json", "", "--seed-requests", "0"}, "--seed-requests 0: must be at least 1"},
		{[]string{"bench", "--raw", "", "--json", "", "--handover-requests", "0"}, "--handover-requests 0: must be at least 1"},
		// Checked before minutes of measuring, not after.
		{[]string{"bench", "--raw", "", "--json", "/nonexistent/x.json"}, "--json /nonexistent/x.json: open /nonexistent/x.json: no such file or directory"},
		{[]string{"bench", "--raw", "", "--json", "", "--md", "/nonexistent/B.md"}, "--md /nonexistent/B.md: open /nonexistent/B.md: no such file or directory"},
	} {
		code, _, errOut := cli(t, tc.args...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		assert.Contains(t, errOut, tc.msg, "%v", tc.args)
	}
	// --backend sim and auto (the default, given) are what explore runs.
	for _, b := range []string{"sim", "auto"} {
		code, out, errOut := cli(t, "explore", "--backend", b, "--requests", "2", "--seeds", "1")
		assert.Equal(t, 0, code, "%s: %s", b, errOut)
		assert.Contains(t, out, "explore: no failure in 1 schedules")
	}
}

// A scenario pinned to the simulation prints a sim run for --print-run
// (its replay fails there as the scenario says; without --backend sim
// and the jitter it passed), in ASCII; on a backend it does not run on,
// `scenario` says so and exits 2 instead of "0 runs" and 0.
func TestSimOnlyScenario(t *testing.T) {
	file := filepath.Join(repoRoot, "tests/multirank/testdata/replay-adp-early-outcome.txt")
	code, out, errOut := cli(t, "scenario", "--print-run", "--with-replay", file)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, " --replay adp-early-outcome --backend sim --msg-jitter 20us\n")
	assert.NotContains(t, out, "µ")
	args := strings.Fields(out)[1:]
	code, _, errOut = cli(t, append([]string{"run"}, args...)...)
	assert.Equal(t, 1, code, "the printed replay fails as the scenario expects: %s", errOut)
	assert.Contains(t, errOut, "pinned by open leases")

	code, out, errOut = cli(t, "scenario", "--backend", "local", file)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, errOut, "--backend local: no scenario given runs on it: "+file+" runs on sim only (its backend key)")
	code, _, errOut = cli(t, "scenario", "--backend", "bogus", file)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `--backend "bogus": must be local or sim`)
}

// A simulation-only flag on another backend changes nothing: the run goes
// on and says so, one note a flag; under --backend sim there is no note.
func TestSimOnlyFlagsNoted(t *testing.T) {
	code, _, errOut := cli(t, "run", "--requests", "2", "--strategy", "pct", "--msg-jitter", "1ms", "--schedule-seed", "5", "--pct-depth", "2")
	require.Equal(t, 0, code, errOut)
	for _, name := range []string{"strategy", "msg-jitter", "schedule-seed", "pct-depth"} {
		assert.Contains(t, errOut, "rankrun: note: --"+name+" applies to --backend sim only; this local run ignores it\n")
	}
	code, _, errOut = cli(t, "run", "--requests", "2")
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, errOut, "applies to --backend sim only", "defaults are not set flags")
	code, _, errOut = cli(t, "run", "--backend", "sim", "--requests", "2", "--strategy", "pct", "--msg-jitter", "1ms")
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, errOut, "applies to --backend sim only")
	// sweep and goodput on the local backend say it too.
	code, _, errOut = cli(t, "sweep", "--pair", "tp=1/tp=1", "--arrival", "closed=1", "--requests", "2", "--strategy", "pct")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "rankrun: note: --strategy applies to --backend sim only; this local run ignores it\n")
	code, _, errOut = cli(t, "goodput", "--backend", "local", "--requests", "2", "--rate-lo", "100", "--rate-hi", "200", "--max-probes", "2",
		"--slo-ttft", "10s", "--slo-tpot", "10s", "--schedule-seed", "3")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "rankrun: note: --schedule-seed applies to --backend sim only; this local run ignores it\n")
	// A refused command line is one line: no note before the refusal.
	for _, args := range [][]string{
		{"run", "--strategy", "pct", "--ranks", "3"},
		{"sweep", "--strategy", "pct", "--jobs", "2", "--pair", "tp=1/tp=1"},
	} {
		code, _, errOut = cli(t, args...)
		assert.Equal(t, 2, code, "%v", args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line: %s", args, errOut)
		assert.NotContains(t, errOut, "note:", "%v", args)
	}
}

// goodput's -h shows its own defaults: the sim backend, and a probe
// deadline that grows with the probe.
func TestGoodputHelpDefaults(t *testing.T) {
	code, out, errOut := cli(t, "goodput", "-h")
	require.Equal(t, 0, code, errOut)
	help := out + errOut
	assert.Regexp(t, `(?m)^  -backend string\n.*\(default "sim"\)$`, help)
	assert.Regexp(t, `(?m)^  -timeout duration\n\s+deadline of each probe \(> 0\); unset: 10m plus four times[^\n]*under sim$`, help,
		"the probe's deadline, with no fixed (default 10m0s) after it")
}
