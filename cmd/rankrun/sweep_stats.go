package main

import (
	"math"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/request"
)

// cellStats are one run's figures as a sweep compares them.
type cellStats struct {
	failed           bool
	tput, tputPerGPU float64 // requests/s
	ttftP50, ttftP99 float64 // ms; NaN with no completed request
	tpotP50          float64 // ms; NaN with no request of two or more tokens
	attain           float64 // share of the workload's requests within the SLO
}

// statsOf reads the figures of rep, a run on gpus GPUs of a workload of
// requests requests, met of which met the SLO (counted by its sloTally).
func statsOf(rep *executor.Report, met int, failed bool, gpus, requests int) cellStats {
	c := cellStats{failed: failed, tput: rep.ThroughputRPS, tputPerGPU: rep.ThroughputRPS / float64(gpus),
		ttftP50: math.NaN(), ttftP99: math.NaN(), tpotP50: math.NaN()}
	if rep.TTFTMs.N > 0 {
		c.ttftP50, c.ttftP99 = rep.TTFTMs.P50, rep.TTFTMs.P99
	}
	if rep.TPOTMs.N > 0 {
		c.tpotP50 = rep.TPOTMs.P50
	}
	if requests > 0 && !failed {
		c.attain = float64(met) / float64(requests)
	}
	return c
}

// sloTally counts the requests of one run that met an SLO as they finish:
// the run's executor.Sink, so that a sweep cell holds a count, not every
// request's record.
type sloTally struct {
	slo slo
	met atomic.Int64
}

func (s *sloTally) Record(q executor.RequestRecord) {
	if metBy(s.slo, q) {
		s.met.Add(1)
	}
}

func (s *sloTally) Event(executor.TraceEvent) {}

// metBy reports whether q completed within both bounds; its TPOT is
// (done - first token) / (output - 1), 0 with one output token.
func metBy(s slo, q executor.RequestRecord) bool {
	if q.State != request.Completed {
		return false
	}
	tpot := 0.0 // ns, unrounded: a TPOT a fraction of a ns over the bound misses it
	if q.Output > 1 {
		tpot = float64(q.Done-q.FirstToken) / float64(q.Output-1)
	}
	return q.TTFT() <= s.TTFT && tpot <= float64(s.TPOT)
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

// summary is a cell over its repeats: the median of each figure, and the
// range of TTFT p99.
type summary struct {
	cellStats
	failedRuns             int
	ttftP99Min, ttftP99Max float64
}

func summarise(runs []cellStats) summary {
	var s summary
	med := func(f func(cellStats) float64) float64 {
		var xs []float64
		for _, r := range runs {
			if v := f(r); !math.IsNaN(v) {
				xs = append(xs, v)
			}
		}
		return quantile(xs, 0.5)
	}
	s.tput = med(func(c cellStats) float64 { return c.tput })
	s.tputPerGPU = med(func(c cellStats) float64 { return c.tputPerGPU })
	s.ttftP50 = med(func(c cellStats) float64 { return c.ttftP50 })
	s.ttftP99 = med(func(c cellStats) float64 { return c.ttftP99 })
	s.tpotP50 = med(func(c cellStats) float64 { return c.tpotP50 })
	s.attain = med(func(c cellStats) float64 { return c.attain })
	s.ttftP99Min, s.ttftP99Max = math.NaN(), math.NaN()
	for _, r := range runs {
		if r.failed {
			s.failedRuns++
		}
		if !math.IsNaN(r.ttftP99) {
			s.ttftP99Min = minNaN(s.ttftP99Min, r.ttftP99)
			s.ttftP99Max = maxNaN(s.ttftP99Max, r.ttftP99)
		}
	}
	s.failed = s.failedRuns > 0
	return s
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

// goodput is a pair's goodput (DistServe): the highest swept arrival rate
// at which the median SLO attainment reaches the share, and that per GPU;
// 0 when no rate does (or no cell has a rate). A failed cell never meets
// the SLO.
type pairGoodput struct {
	pair    string
	gpus    int
	rate    float64
	perGPU  float64
	bestRPS float64 // throughput per GPU at the goodput rate (ties)
	p99     float64 // TTFT p99 at the goodput rate (ties)
}

func goodputs(runs []*sweepRun, s slo) []pairGoodput {
	var out []pairGoodput
	idx := map[string]int{}
	for _, r := range runs {
		i, ok := idx[r.pair]
		if !ok {
			i = len(out)
			idx[r.pair] = i
			out = append(out, pairGoodput{pair: r.pair, gpus: r.gpus(), p99: math.NaN()})
		}
		sum := r.summary
		if r.rate <= 0 || sum.failed || sum.attain < s.Share || r.rate < out[i].rate {
			continue
		}
		out[i].rate, out[i].perGPU = r.rate, r.rate/float64(r.gpus())
		out[i].bestRPS, out[i].p99 = sum.tputPerGPU, sum.ttftP99
	}
	return out
}

// ranked orders goodputs best first: goodput per GPU, then throughput per
// GPU at it, then TTFT p99 (lower first), then the sweep's order.
func ranked(gs []pairGoodput) []pairGoodput {
	out := slices.Clone(gs)
	slices.SortStableFunc(out, func(a, b pairGoodput) int {
		switch {
		case a.perGPU != b.perGPU:
			return cmpDesc(a.perGPU, b.perGPU)
		case a.bestRPS != b.bestRPS:
			return cmpDesc(a.bestRPS, b.bestRPS)
		case a.p99 != b.p99 && !math.IsNaN(a.p99) && !math.IsNaN(b.p99):
			return cmpDesc(b.p99, a.p99)
		}
		return 0
	})
	return out
}

func cmpDesc(a, b float64) int {
	if a > b {
		return -1
	}
	return 1
}
