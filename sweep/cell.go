package sweep

import (
	"fmt"
	"math"
	"sort"
	"sync/atomic"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
	"github.com/rankrun/rankrun/request"
)

// Cell is one cell of a sweep: a layout pair under one arrival pattern
// (its Config), run len(Reports) times (NewCell makes one). Run fills
// everything after Config; a cell with no Reports is never run and never
// a result.
type Cell struct {
	Pair    Pair
	Arrival string  // the arrival pattern, as executor.Arrival prints it
	Rate    float64 // requests/s of a rate or poisson arrival, else 0
	Config  executor.Config

	Reports []*executor.Report // one per repeat, always set after the run (synthesised on error)
	Errs    []error            // each repeat's own error, if it returned one
	Met     []int              // each repeat's requests that met the SLO
	Ran     []bool             // each repeat ran to its end (not cut short by ctx)
	Stats   []Stats            // each repeat's figures
	Summary Summary            // the repeats together
}

// NewCell is a cell of cfg (its layouts, arrival and rate read from it),
// to run repeats times (at least once).
func NewCell(cfg executor.Config, repeats int) *Cell {
	repeats = max(repeats, 1)
	c := &Cell{Pair: Pair{cfg.Ctx, cfg.Gen}, Arrival: cfg.Workload.Arrival.String(), Config: cfg,
		Reports: make([]*executor.Report, repeats), Errs: make([]error, repeats), Met: make([]int, repeats), Ran: make([]bool, repeats)}
	if k := cfg.Workload.Arrival.Kind; k == executor.Rate || k == executor.Poisson {
		c.Rate = cfg.Workload.Arrival.Rate
	}
	if cfg.Workload.Arrival.Kind == executor.Traced {
		// A trace's pace: its rows over their replayed span (scale=K
		// multiplies it), so goodput compares scales as it does rates.
		c.Rate = cfg.Workload.OfferedRate()
	}
	return c
}

// GPUs is the pair's ranks.
func (c *Cell) GPUs() int { return c.Pair.GPUs() }

// FailedAt reports whether repeat i errored, leaked or pinned blocks.
func (c *Cell) FailedAt(i int) bool {
	return c.Errs[i] != nil || c.Reports[i] == nil || !c.Reports[i].OK()
}

// Failed reports whether any repeat failed.
func (c *Cell) Failed() bool {
	for i := range c.Reports {
		if c.FailedAt(i) {
			return true
		}
	}
	return false
}

// Stats are one run's figures as a sweep compares them.
type Stats struct {
	Failed           bool
	Tput, TputPerGPU float64 // requests/s
	TTFTP50, TTFTP99 float64 // ms; NaN with no completed request
	TPOTP50          float64 // ms; NaN with no request of two or more tokens
	Attain           float64 // share of the workload's requests within the SLO
}

// StatsOf reads the figures of rep, a run on gpus GPUs of a workload of
// requests requests, met of which met the SLO (counted by its Tally). A
// failed run attains nothing.
func StatsOf(rep *executor.Report, met int, failed bool, gpus, requests int) Stats {
	s := Stats{Failed: failed, Tput: rep.ThroughputRPS, TputPerGPU: rep.ThroughputRPS / float64(gpus),
		TTFTP50: math.NaN(), TTFTP99: math.NaN(), TPOTP50: math.NaN()}
	if rep.TTFTMs.N > 0 {
		s.TTFTP50, s.TTFTP99 = rep.TTFTMs.P50, rep.TTFTMs.P99
	}
	if rep.TPOTMs.N > 0 {
		s.TPOTP50 = rep.TPOTMs.P50
	}
	if requests > 0 && !failed {
		s.Attain = float64(met) / float64(requests)
	}
	return s
}

// Tally counts the requests of one run that met an SLO as they finish:
// the run's executor.Sink, so that a cell holds a count, not every
// request's record. It is safe for concurrent use.
type Tally struct {
	SLO goodput.SLO
	met atomic.Int64
}

// Record counts q when it met the SLO.
func (t *Tally) Record(q executor.RequestRecord) {
	if MetBy(t.SLO, q) {
		t.met.Add(1)
	}
}

// Event ignores trace events.
func (t *Tally) Event(executor.TraceEvent) {}

// Met is the requests counted so far.
func (t *Tally) Met() int { return int(t.met.Load()) }

// MetBy reports whether q completed within both bounds; its TPOT is
// (done - first token) / (output - 1), 0 with one output token.
func MetBy(s goodput.SLO, q executor.RequestRecord) bool {
	if q.State != request.Completed {
		return false
	}
	tpot := 0.0 // ns, unrounded: a TPOT a fraction of a ns over the bound misses it
	if q.Output > 1 {
		tpot = float64(q.Done-q.FirstToken) / float64(q.Output-1)
	}
	return q.TTFT() <= s.TTFT && tpot <= float64(s.TPOT)
}

// Summary is a cell over its repeats: the median of each figure (of the
// repeats that have it), the failed repeats, and the range of TTFT p99.
type Summary struct {
	Stats
	FailedRuns             int
	TTFTP99Min, TTFTP99Max float64
}

// Summarise is the summary of a cell's repeats.
func Summarise(runs []Stats) Summary {
	var s Summary
	med := func(f func(Stats) float64) float64 {
		var xs []float64
		for _, r := range runs {
			if v := f(r); !math.IsNaN(v) {
				xs = append(xs, v)
			}
		}
		return quantile(xs, 0.5)
	}
	s.Tput = med(func(c Stats) float64 { return c.Tput })
	s.TputPerGPU = med(func(c Stats) float64 { return c.TputPerGPU })
	s.TTFTP50 = med(func(c Stats) float64 { return c.TTFTP50 })
	s.TTFTP99 = med(func(c Stats) float64 { return c.TTFTP99 })
	s.TPOTP50 = med(func(c Stats) float64 { return c.TPOTP50 })
	s.Attain = med(func(c Stats) float64 { return c.Attain })
	s.TTFTP99Min, s.TTFTP99Max = math.NaN(), math.NaN()
	for _, r := range runs {
		if r.Failed {
			s.FailedRuns++
		}
		if !math.IsNaN(r.TTFTP99) {
			s.TTFTP99Min = minNaN(s.TTFTP99Min, r.TTFTP99)
			s.TTFTP99Max = maxNaN(s.TTFTP99Max, r.TTFTP99)
		}
	}
	s.Failed = s.FailedRuns > 0
	return s
}

// quantile is the q-quantile of xs by the nearest rank (xs is sorted in
// place); NaN for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	sort.Float64s(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

func minNaN(a, b float64) float64 {
	if math.IsNaN(a) {
		return b
	}
	return math.Min(a, b)
}

func maxNaN(a, b float64) float64 {
	if math.IsNaN(a) {
		return b
	}
	return math.Max(a, b)
}

// FailedReport stands for a repeat that returned no report: the cell's
// configuration and err as its one error, so that every repeat has a
// report to print.
func FailedReport(cfg *executor.Config, err error) *executor.Report {
	msg := "no report"
	if err != nil {
		msg = err.Error()
	}
	w := cfg.Workload
	return &executor.Report{Ctx: cfg.Ctx.String(), Gen: cfg.Gen.String(), Ranks: cfg.Ranks(), Mode: cfg.Mode.String(),
		Workload: fmt.Sprintf("%d requests, %d input tokens, %d output tokens, %s", w.Requests, w.InputTokens, w.OutputTokens, w.Arrival),
		Replays:  cfg.Replays.String(), Faults: []string{}, Errors: []string{msg}, Requests: []executor.RequestRecord{}}
}
