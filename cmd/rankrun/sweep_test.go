package main

import (
	"bytes"
	"encoding/csv"
	stdcsv "encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/topology"
)

// readCSV returns a CSV file's rows as maps by header.
func readCSV(t *testing.T, path string) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	var out []map[string]string
	for _, rec := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			m[h] = rec[i]
		}
		out = append(out, m)
	}
	return out
}

// The grid of a 3-GPU budget: every pair of at most 3 ranks in all, each
// side's layouts of at most 2 ranks from topology.Enumerate, CTX from tp,
// pp, cp, dp and GEN from tp, pp, dp (a dense model: no adp), under two
// rates; goodput per GPU per pair and the best placement, in the table and
// the CSV alike.
func TestSweepGrid(t *testing.T) {
	dir := t.TempDir()
	csvPath, svgPath := filepath.Join(dir, "g.csv"), filepath.Join(dir, "g.svg")
	code, out, errOut := cli(t, "sweep", "--backend", "sim", "--model", "llama-3-8b", "--hardware", "h100", "--gpus", "3",
		"--requests", "4", "--input", "256", "--output", "4", "--arrival", "poisson=5,poisson=50", "--slo-ttft", "40ms", "--slo-tpot", "20ms",
		"--csv", csvPath, "--plot", svgPath)
	require.Equal(t, 0, code, "stderr: %s", errOut)

	// The pairs, restated from the rule.
	geom := costmodel.Models["llama-3-8b"].Geometry(16)
	var want []string
	for _, c := range topology.Enumerate(geom, 2) {
		for _, g := range topology.Enumerate(geom, 2) {
			if c.Ranks()+g.Ranks() <= 3 && !c.AttentionDP && !g.AttentionDP && g.CP == 1 {
				want = append(want, c.String()+"/"+g.String())
			}
		}
	}
	require.Len(t, want, 8)
	rows := readCSV(t, csvPath)
	require.Len(t, rows, 2*len(want))
	best, bestPairs := -1.0, map[string]bool{}
	for i, r := range rows {
		pair := r["ctx"] + "/" + r["gen"]
		assert.Equal(t, want[i/2], pair, "row %d", i)
		assert.Equal(t, "ok", r["status"])
		gpus, err := strconv.Atoi(r["gpus"])
		require.NoError(t, err)
		tput, _ := strconv.ParseFloat(r["throughput_rps"], 64)
		perGPU, _ := strconv.ParseFloat(r["throughput_per_gpu_rps"], 64)
		assert.InDelta(t, tput/float64(gpus), perGPU, 1e-9)
		g, err := strconv.ParseFloat(r["goodput_per_gpu_rps"], 64)
		require.NoError(t, err, "row %d", i)
		if g > best {
			best, bestPairs = g, map[string]bool{}
		}
		if g == best {
			bestPairs[pair] = true
		}
		assert.Contains(t, out, pair)
	}
	require.Positive(t, best)
	assert.Contains(t, out, "goodput per GPU: the highest rate at which >= 90% of requests within TTFT 40ms and TPOT 20ms")
	named := regexp.MustCompile(`best placement for 3 GPUs: (\S+) \(3 GPUs\)`).FindStringSubmatch(out)
	require.Len(t, named, 2, out)
	assert.True(t, bestPairs[named[1]], "%s has the highest goodput per GPU of the CSV (%v)", named[1], bestPairs)
	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	assert.Contains(t, string(svg), "Goodput per GPU")
	assert.Contains(t, string(svg), "4 requests, 256 input tokens, 4 output tokens; llama-3-8b on h100-nvlink-ib400")

	// An SLO nobody meets names no placement.
	code, out, errOut = cli(t, "sweep", "--backend", "sim", "--model", "llama-3-8b", "--hardware", "h100", "--gpus", "2",
		"--requests", "2", "--input", "64", "--output", "2", "--arrival", "poisson=5", "--slo-ttft", "1us")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "best placement for 2 GPUs: none")
}

// --repeat N runs each cell N times with seeds --seed, --seed+1, ...: the
// table reports the median TTFT p99 and its range, the CSV every repeat.
func TestSweepRepeat(t *testing.T) {
	csvPath := filepath.Join(t.TempDir(), "r.csv")
	code, out, errOut := cli(t, "sweep", "--backend", "sim", "--pair", "tp=1/tp=1", "--arrival", "poisson=2000", "--requests", "16",
		"--prefill-per-token", "2us", "--decode-per-step", "200us", "--repeat", "3", "--csv", csvPath)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	assert.Contains(t, lines[0], "medians of 3 repeats")
	require.Contains(t, lines[1], "TTFT p99 min..max ms")
	rows := readCSV(t, csvPath)
	require.Len(t, rows, 3)
	var p99s []float64
	for i, r := range rows {
		assert.Equal(t, strconv.Itoa(i+1), r["repeat"])
		v, err := strconv.ParseFloat(r["ttft_p99_ms"], 64)
		require.NoError(t, err)
		p99s = append(p99s, v)
	}
	sorted := slices.Clone(p99s)
	slices.Sort(sorted)
	assert.Less(t, sorted[0], sorted[2], "different seeds, different arrivals: a spread to report")
	f := strings.Fields(lines[2])
	assert.Equal(t, strconv.FormatFloat(sorted[1], 'f', 3, 64), f[7], "TTFT p99: the median repeat")
	assert.Equal(t, strconv.FormatFloat(sorted[0], 'f', 3, 64)+".."+strconv.FormatFloat(sorted[2], 'f', 3, 64), f[8])
}

// On an MoE model the grid tries expert parallelism: every ep that
// divides a layout's FFN ranks and the experts, where the dimensions allow
// it, and none where they do not.
func TestSweepGridTriesExpertParallelism(t *testing.T) {
	pairs := func(args ...string) []string {
		csv := filepath.Join(t.TempDir(), "sw.csv")
		code, _, errOut := cli(t, append([]string{"sweep", "--backend", "sim", "--model", "gpt-oss-120b", "--hardware", "gb200", "--gpus", "3",
			"--requests", "2", "--input", "256", "--output", "4", "--arrival", "closed=1", "--kv-sample", "8", "--csv", csv}, args...)...)
		require.Equal(t, 0, code, errOut)
		f, err := os.Open(csv)
		require.NoError(t, err)
		defer f.Close()
		rows, err := stdcsv.NewReader(f).ReadAll()
		require.NoError(t, err)
		require.Equal(t, []string{"ctx", "gen"}, rows[0][:2])
		var out []string
		for _, r := range rows[1:] {
			out = append(out, r[0]+"/"+r[1])
		}
		return out
	}
	all := pairs()
	assert.Contains(t, all, "tp=2,ep=2/tp=1")
	assert.Contains(t, all, "dp=2,ep=2,adp/tp=1")
	assert.Contains(t, all, "tp=1/tp=2,ep=2")
	assert.Contains(t, all, "tp=2/tp=1", "and the same layouts without ep")
	noEP := pairs("--ctx-dims", "tp,dp,adp", "--gen-dims", "tp")
	assert.NotEmpty(t, noEP)
	for _, p := range noEP {
		assert.NotContains(t, p, "ep=", "ep not allowed: %s", p)
	}
	assert.Less(t, len(noEP), len(all))
}

func TestSweepGridBadInput(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"gpus and pair", []string{"--gpus", "4", "--pair", "tp=1/tp=1"}, []string{"--gpus and --pair"}},
		{"one gpu", []string{"--gpus", "1"}, []string{"--gpus 1", "at least 2"}},
		{"share", []string{"--slo-share", "0"}, []string{"--slo-share 0", "(0, 1]"}},
		{"ttft", []string{"--slo-ttft", "-1s"}, []string{"--slo-ttft -1s", "positive"}},
		{"repeat", []string{"--repeat", "0"}, []string{"--repeat 0", "[1, 1000]"}},
		{"dims", []string{"--gpus", "4", "--ctx-dims", "tp,xp"}, []string{"--ctx-dims", `"xp"`, "tp, pp, cp, dp, adp, ep"}},
		{"ep without an MoE model", []string{"--gpus", "4", "--ctx-dims", "tp,ep"}, []string{"--ctx-dims/--gen-dims ep", "mixture-of-experts --model"}},
		{"dims without gpus", []string{"--gen-dims", "tp"}, []string{"--gen-dims", "--gpus"}},
		{"jobs on local", []string{"--jobs", "2"}, []string{"--jobs 2", "--backend sim"}},
		{"no pair fits", []string{"--gpus", "2", "--model", "llama-3-70b", "--hardware", "h100"}, []string{"--gpus 2", "no CTX/GEN pair"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := cli(t, append([]string{"sweep", "--requests", "2"}, c.args...)...)
			oneLine(t, code, out, errOut, c.want...)
		})
	}
}

// sweep runs checked by default and honours --unchecked on every backend,
// as run does. (Found by review: each sweep run re-read the flag copy that
// still said checked.)
func TestSweepHonoursUnchecked(t *testing.T) {
	for _, backend := range []string{"local", "sim"} {
		for _, unchecked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unchecked=%v", backend, unchecked), func(t *testing.T) {
				js := filepath.Join(t.TempDir(), "sw.json")
				args := []string{"sweep", "--backend", backend, "--pair", "tp=1/tp=2", "--requests", "4", "--json", js}
				if unchecked {
					args = append(args, "--unchecked")
				}
				code, _, errOut := cli(t, args...)
				require.Equal(t, 0, code, errOut)
				b, err := os.ReadFile(js)
				require.NoError(t, err)
				var reps []struct {
					Checked *bool `json:"checked"`
				}
				require.NoError(t, json.Unmarshal(b, &reps))
				require.NotEmpty(t, reps)
				for i, r := range reps {
					require.NotNil(t, r.Checked, "run %d: no checked field", i)
					require.Equal(t, !unchecked, *r.Checked, "run %d", i)
				}
			})
		}
	}
}

// A plan of more than maxPlannedRuns runs is refused up front, with its
// size and how to narrow it, unless --yes; a huge --gpus is refused as
// fast (the enumeration stops at the bound instead of listing millions of
// pairs first).
func TestSweepPlanBound(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--gpus", "64", "--arrival", "closed=1"}, "the plan is more than 5000 runs (more than 5000 layout pairs x 1 arrival patterns x 1 repeats)"},
		{[]string{"--gpus", "1048576", "--arrival", "closed=1,closed=2"}, "the plan is more than 5000 runs (more than 2500 layout pairs x 2 arrival patterns x 1 repeats)"},
		{[]string{"--pair", "tp=1/tp=1", "--repeat", "1000", "--arrival", "closed=1,closed=2,closed=3,closed=4,closed=5,closed=6"},
			"the plan is 6000 runs (1 layout pairs x 6 arrival patterns x 1000 repeats)"},
		// Explicit pairs are never cut: the count is exact.
		{[]string{"--pair", "tp=1/tp=1", "--pair", "tp=1/tp=2", "--pair", "tp=2/tp=1", "--repeat", "1000", "--arrival", "closed=1,closed=2"},
			"the plan is 6000 runs (3 layout pairs x 2 arrival patterns x 1000 repeats); more than 5000 runs needs --yes, or narrow it (fewer --pair, --arrival or --repeat)"},
	} {
		code, out, errOut := cli(t, append([]string{"sweep", "--backend", "sim", "--requests", "2"}, tc.args...)...)
		assert.Equal(t, 2, code, "%v", tc.args)
		assert.Empty(t, out)
		assert.Contains(t, errOut, tc.msg)
		assert.Contains(t, errOut, "more than 5000 runs needs --yes, or narrow it")
	}
	// --yes takes the plan: what refuses it then is the next check (here
	// an output that cannot be written), not its size.
	code, _, errOut := cli(t, "sweep", "--backend", "sim", "--requests", "2", "--pair", "tp=1/tp=1", "--repeat", "1000",
		"--arrival", "closed=1,closed=2,closed=3,closed=4,closed=5,closed=6", "--yes", "--csv", filepath.Join(t.TempDir(), "no", "such", "dir.csv"))
	assert.Equal(t, 2, code)
	assert.NotContains(t, errOut, "the plan is")
	assert.Contains(t, errOut, "--csv")
}
