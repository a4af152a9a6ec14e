package sweep

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
)

// A request meets the SLO when it completed and both bounds hold, TPOT
// being (done - first token) / (output - 1); StatsOf reads the report's
// figures and the tally's count; a failed run meets nothing.
func TestStatsOf(t *testing.T) {
	tally := &Tally{SLO: goodput.SLO{TTFT: 20e6, TPOT: 20e6, Share: 0.9}}
	for _, q := range []executor.RequestRecord{
		{Output: 5, Arrival: 0, FirstToken: 10e6, Done: 50e6, State: request.Completed},     // TTFT 10 ms, TPOT 10 ms
		{Output: 5, Arrival: 0, FirstToken: 30e6, Done: 70e6, State: request.Completed},     // TTFT 30 ms: misses
		{Output: 3, Arrival: 0, FirstToken: 10e6, Done: 70e6, State: request.Completed},     // TPOT 30 ms: misses
		{Output: 5, Arrival: 0, FirstToken: 5e6, Done: 25e6, State: request.Completed},      // TTFT 5, TPOT 5
		{Output: 5, Arrival: 0, FirstToken: 5e6, Done: 25e6, State: request.Failed},         // within bounds, but failed
		{Output: 1, Arrival: 0, FirstToken: 20e6, Done: 20e6, State: request.Completed},     // one token: TPOT 0, TTFT at the bound
		{Output: 5, Arrival: 0, FirstToken: 10e6, Done: 90e6 + 1, State: request.Completed}, // TPOT a quarter ns over: misses
	} {
		tally.Record(q)
	}
	assert.Equal(t, 3, tally.Met())
	rep := &executor.Report{ThroughputRPS: 8, TPOTMs: executor.Dist{N: 4, P50: 10}, TTFTMs: executor.Dist{N: 4, P50: 7, P99: 30}}
	s := StatsOf(rep, tally.Met(), false, 4, 6)
	assert.InDelta(t, 2.0, s.TputPerGPU, 0)
	assert.InDelta(t, 3.0/6, s.Attain, 1e-12, "3 of the workload's 6 requests met it")
	assert.InDelta(t, 10.0, s.TPOTP50, 1e-9, "the report's TPOT")
	assert.InDelta(t, 7.0, s.TTFTP50, 0, "the report's TTFT p50")
	assert.InDelta(t, 30.0, s.TTFTP99, 0, "and p99")
	assert.True(t, math.IsNaN(StatsOf(&executor.Report{}, 0, false, 4, 6).TPOTP50), "no TPOT sample: NaN")
	assert.True(t, math.IsNaN(StatsOf(&executor.Report{}, 0, false, 4, 6).TTFTP99), "no TTFT sample: NaN")
	assert.Zero(t, StatsOf(rep, 3, true, 4, 6).Attain)
}

// A cell's summary is the median of each figure over its repeats, NaN
// figures left out, with the range of TTFT p99 and the failed repeats.
func TestSummarise(t *testing.T) {
	nan := math.NaN()
	s := Summarise([]Stats{
		{Tput: 3, TputPerGPU: 1.5, TTFTP50: 10, TTFTP99: 30, TPOTP50: 2, Attain: 0.9},
		{Tput: 1, TputPerGPU: 0.5, TTFTP50: nan, TTFTP99: nan, TPOTP50: nan, Attain: 0, Failed: true},
		{Tput: 2, TputPerGPU: 1, TTFTP50: 20, TTFTP99: 50, TPOTP50: 4, Attain: 1},
	})
	assert.InDelta(t, 2, s.Tput, 0)
	assert.InDelta(t, 1, s.TputPerGPU, 0)
	assert.InDelta(t, 10, s.TTFTP50, 0, "the lower median of the two that have it")
	assert.InDelta(t, 30, s.TTFTP99Min, 0)
	assert.InDelta(t, 50, s.TTFTP99Max, 0)
	assert.InDelta(t, 0.9, s.Attain, 0)
	assert.Equal(t, 1, s.FailedRuns)
	assert.True(t, s.Failed, "one failed repeat fails the cell")
	// NaN figures are left out of a median: of 10, 20, 30 and two NaNs
	// it is 20 (with the NaNs counted, the nearest rank would be 10).
	five := Summarise([]Stats{{TTFTP99: 30, TPOTP50: 3}, {TTFTP99: nan, TPOTP50: nan}, {TTFTP99: 10, TPOTP50: 1},
		{TTFTP99: nan, TPOTP50: nan}, {TTFTP99: 20, TPOTP50: 2}})
	assert.InDelta(t, 20, five.TTFTP99, 0)
	assert.InDelta(t, 2, five.TPOTP50, 0)
	none := Summarise([]Stats{{TTFTP99: nan, TTFTP50: nan, TPOTP50: nan}})
	assert.True(t, math.IsNaN(none.TTFTP99Min) && math.IsNaN(none.TTFTP99))
	assert.False(t, none.Failed)
}

// Goodput is DistServe's: the highest rate at which the share is met; a
// failed cell never meets it; pairs rank by goodput per GPU, then
// throughput per GPU at it, then TTFT p99.
func TestGoodputs(t *testing.T) {
	l1, l2 := topology.MustParseLayout("tp=1"), topology.MustParseLayout("tp=2")
	cell := func(ctx, gen topology.Layout, rate, attain float64, failed bool) *Cell {
		c := &Cell{Pair: Pair{ctx, gen}, Rate: rate}
		c.Summary.Attain, c.Summary.Failed, c.Summary.TTFTP99, c.Summary.TputPerGPU = attain, failed, 1, rate/10
		return c
	}
	l4 := topology.MustParseLayout("tp=4")
	cells := []*Cell{
		cell(l1, l1, 2, 1, false), cell(l1, l1, 4, 0.95, false), cell(l1, l1, 8, 0.5, false),
		cell(l2, l2, 2, 1, false), cell(l2, l2, 4, 1, false), cell(l2, l2, 8, 1, true),
		cell(l1, l2, 2, 0.1, false),
		cell(l4, l4, 8, 1, false), cell(l4, l4, 16, 0.89, false),
	}
	gs := Goodputs(cells, goodput.SLO{Share: 0.9})
	require.Len(t, gs, 4)
	assert.Equal(t, PairGoodput{Pair: "tp=1/tp=1", GPUs: 2, Rate: 4, PerGPU: 2, BestRPS: 0.4, P99: 1}, gs[0])
	assert.InDelta(t, 4, gs[1].Rate, 0, "tp=2/tp=2: the failed cell at 8 does not count")
	assert.InDelta(t, 1, gs[1].PerGPU, 0)
	assert.Zero(t, gs[2].Rate, "tp=1/tp=2 never meets the share")
	assert.True(t, math.IsNaN(gs[2].P99))
	assert.InDelta(t, 8, gs[3].Rate, 0, "tp=4/tp=4: 0.89 at 16 is under the share")
	var order []string
	for _, g := range Ranked(gs) {
		order = append(order, g.Pair)
	}
	// tp=4/tp=4 and tp=2/tp=2 tie at 1 per GPU: tp=4's throughput per
	// GPU at it (0.8) puts it before tp=2's (0.4).
	assert.Equal(t, []string{"tp=1/tp=1", "tp=4/tp=4", "tp=2/tp=2", "tp=1/tp=2"}, order)

	// Ties on goodput per GPU: throughput per GPU at it, then TTFT p99.
	tie := []PairGoodput{
		{Pair: "slow", PerGPU: 1, BestRPS: 0.5, P99: 10},
		{Pair: "fast", PerGPU: 1, BestRPS: 0.6, P99: 90},
		{Pair: "late", PerGPU: 1, BestRPS: 0.6, P99: 95},
	}
	order = nil
	for _, g := range Ranked(tie) {
		order = append(order, g.Pair)
	}
	assert.Equal(t, []string{"fast", "late", "slow"}, order)
}

// A pair's goodput is its highest rate that meets the share, whatever
// the order of its cells; an attainment exactly at the share meets it; a
// cell whose attainment is NaN (no repeat ran) meets nothing.
func TestGoodputsOrderAndEdges(t *testing.T) {
	l1 := topology.MustParseLayout("tp=1")
	cell := func(rate, attain float64) *Cell {
		c := &Cell{Pair: Pair{l1, l1}, Rate: rate}
		c.Summary.Attain = attain
		return c
	}
	gs := Goodputs([]*Cell{cell(8, 1), cell(2, 1), cell(4, 1)}, goodput.SLO{Share: 0.9})
	assert.InDelta(t, 8, gs[0].Rate, 0, "the highest rate met, not the last")
	gs = Goodputs([]*Cell{cell(2, 0.9), cell(4, 0.8999)}, goodput.SLO{Share: 0.9})
	assert.InDelta(t, 2, gs[0].Rate, 0, "exactly at the share meets it")
	gs = Goodputs([]*Cell{cell(1000, math.NaN())}, goodput.SLO{Share: 0.9})
	assert.Zero(t, gs[0].Rate, "NaN attains nothing")
}

// Ranked keeps the given order among ties (more than sort's insertion
// threshold of them) and leaves its input alone.
func TestRankedIsStable(t *testing.T) {
	var gs []PairGoodput
	for i := range 40 {
		gs = append(gs, PairGoodput{Pair: fmt.Sprintf("p%02d", i), P99: math.NaN()})
	}
	gs = append(gs, PairGoodput{Pair: "best", PerGPU: 1})
	names := func(gs []PairGoodput) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.Pair)
		}
		return out
	}
	in := names(gs)
	out := Ranked(gs)
	assert.Equal(t, in, names(gs), "the input is not reordered")
	assert.Equal(t, "best", out[0].Pair)
	for i, g := range out[1:] {
		assert.Equal(t, fmt.Sprintf("p%02d", i), g.Pair, "ties in the given order")
	}
}
