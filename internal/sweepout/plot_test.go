package sweepout

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
	"github.com/rankrun/rankrun/sweep"
	"github.com/rankrun/rankrun/topology"
)

// A plot names the workload (in its title, and the arrival in the legend)
// with one arrival pattern too, and marks a failed cell as failed: per
// pair in the bar plot, as a cross in the legend of the rate plot.
func TestSweepPlotMarksFailures(t *testing.T) {
	l1, l2 := topology.MustParseLayout("tp=1"), topology.MustParseLayout("tp=2")
	cfg := executor.Config{Workload: executor.Workload{Requests: 6, InputTokens: 256, OutputTokens: 8}}
	cell := func(ctx, gen topology.Layout, arrival string, rate float64, failed bool) *sweep.Cell {
		r := &sweep.Cell{Pair: sweep.Pair{Ctx: ctx, Gen: gen}, Arrival: arrival, Rate: rate, Config: cfg, Reports: make([]*executor.Report, 1)}
		r.Summary.Failed, r.Summary.Attain, r.Summary.TTFTP99, r.Summary.TPOTP50, r.Summary.Tput = failed, 1, 10, 1, 5
		return r
	}
	sw := Sweep{Cells: []*sweep.Cell{cell(l1, l1, "closed=4", 0, false), cell(l1, l2, "closed=4", 0, true)},
		SLO: goodput.SLO{TTFT: 1, TPOT: 1, Share: 0.9}}
	sw.Title, sw.Short = Title(sw.Cells, func(*executor.Config) string { return "" })
	dir := t.TempDir()
	bars := filepath.Join(dir, "bars.svg")
	require.NoError(t, sw.Plot(bars))
	svg, err := os.ReadFile(bars)
	require.NoError(t, err)
	s := string(svg)
	assert.Contains(t, s, ">6 requests, 256 input tokens, 8 output tokens<")
	assert.Contains(t, s, ">closed=4<", "the one arrival pattern is in the legend")
	assert.Equal(t, 2, strings.Count(s, ">failed<"), "one mark per panel for the failed pair")

	sw.Cells = []*sweep.Cell{cell(l1, l1, "poisson=1", 1, false), cell(l1, l1, "poisson=2", 2, true),
		cell(l1, l2, "poisson=1", 1, false), cell(l1, l2, "poisson=2", 2, false)}
	rates := filepath.Join(dir, "rates.svg")
	require.NoError(t, sw.Plot(rates))
	svg, err = os.ReadFile(rates)
	require.NoError(t, err)
	s = string(svg)
	assert.Contains(t, s, ">tp=1/tp=1 failed<", "the failed cell's cross is in the legend")
	assert.Contains(t, s, ">Goodput per GPU")
}

// Every label of an axis has the same number of decimals.
func TestEvenTicks(t *testing.T) {
	for _, r := range [][2]float64{{0, 1}, {0, 7.5}, {0, 160}, {0, 0.003}, {0.5, 2.25}, {0, 1e6}} {
		var decimals []int
		for _, tk := range (evenTicks{}).Ticks(r[0], r[1]) {
			if tk.Label == "" {
				continue
			}
			assert.NotContains(t, tk.Label, "e", "%v: %q", r, tk.Label)
			d := 0
			if i := strings.IndexByte(tk.Label, '.'); i >= 0 {
				d = len(tk.Label) - i - 1
			}
			decimals = append(decimals, d)
			v, err := strconv.ParseFloat(tk.Label, 64)
			require.NoError(t, err)
			assert.InDelta(t, tk.Value, v, math.Abs(tk.Value)*1e-9+1e-12, "%v: the label is the value", r)
		}
		require.NotEmpty(t, decimals, "%v", r)
		for _, d := range decimals {
			assert.Equal(t, decimals[0], d, "%v: %v", r, decimals)
		}
	}
}
