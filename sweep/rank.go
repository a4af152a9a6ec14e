package sweep

import (
	"math"
	"slices"

	"github.com/rankrun/rankrun/goodput"
)

// PairGoodput is a pair's goodput (DistServe) over the rates swept: the
// highest rate at which the cell's median SLO attainment reaches the
// share, and that per GPU; 0 when no rate does (or no cell has a rate).
// A failed cell never meets the SLO.
type PairGoodput struct {
	Pair    string
	GPUs    int
	Rate    float64 // requests/s
	PerGPU  float64 // Rate / GPUs
	BestRPS float64 // throughput per GPU at the goodput rate (breaks ties)
	P99     float64 // TTFT p99 at the goodput rate, ms (breaks ties; NaN when no rate met)
}

// Goodputs is every pair's goodput, in the order of the pairs' first
// cells.
func Goodputs(cells []*Cell, s goodput.SLO) []PairGoodput {
	var out []PairGoodput
	idx := map[string]int{}
	for _, c := range cells {
		name := c.Pair.String()
		i, ok := idx[name]
		if !ok {
			i = len(out)
			idx[name] = i
			out = append(out, PairGoodput{Pair: name, GPUs: c.GPUs(), P99: math.NaN()})
		}
		sum := c.Summary
		if c.Rate <= 0 || sum.Failed || !(sum.Attain >= s.Share) || c.Rate < out[i].Rate { // NaN attains nothing
			continue
		}
		out[i].Rate, out[i].PerGPU = c.Rate, c.Rate/float64(c.GPUs())
		out[i].BestRPS, out[i].P99 = sum.TputPerGPU, sum.TTFTP99
	}
	return out
}

// Ranked orders goodputs best first: goodput per GPU, then throughput per
// GPU at it, then TTFT p99 (lower first), then the given order.
func Ranked(gs []PairGoodput) []PairGoodput {
	out := slices.Clone(gs)
	slices.SortStableFunc(out, func(a, b PairGoodput) int {
		switch {
		case a.PerGPU != b.PerGPU:
			return cmpDesc(a.PerGPU, b.PerGPU)
		case a.BestRPS != b.BestRPS:
			return cmpDesc(a.BestRPS, b.BestRPS)
		case a.P99 != b.P99 && !math.IsNaN(a.P99) && !math.IsNaN(b.P99):
			return cmpDesc(b.P99, a.P99)
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
