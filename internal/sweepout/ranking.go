package sweepout

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rankrun/rankrun/sweep"
)

// goodputTable prints the best pairs by goodput per GPU and names the best
// placement; nothing when no cell has a rate.
func (sw Sweep) goodputTable(w io.Writer) {
	gs := sw.goodputs()
	if gs == nil {
		return
	}
	best := sweep.Ranked(gs)
	const top = 10
	fmt.Fprintf(w, "\ngoodput per GPU: the highest rate at which %s, over GPUs (rates swept: %s)\n", sw.SLO, strings.Join(sw.rates(), " "))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	// The last two columns break ties on goodput per GPU, in that order.
	fmt.Fprintln(tw, "rank\tpair\tGPUs\tgoodput rps\tper GPU rps\tthroughput per GPU at it\tTTFT p99 ms at it\t")
	for i, g := range best[:min(top, len(best))] {
		at, p99 := "-", "-"
		if g.PerGPU > 0 {
			at, p99 = fmt.Sprintf("%.3f", g.BestRPS), fmt.Sprintf("%.1f", g.P99)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.3f\t%s\t%s\t\n", i+1, g.Pair, g.GPUs, fmtRate(g.Rate), g.PerGPU, at, p99)
	}
	_ = tw.Flush()
	if len(best) > top {
		fmt.Fprintf(w, "(%d more pairs: --csv has them all)\n", len(best)-top)
	}
	budget := ""
	if sw.GPUs > 0 {
		budget = fmt.Sprintf(" for %d GPUs", sw.GPUs)
	}
	if sw.Cut != "" {
		budget += " among the " + sw.Cut
	}
	if b := best[0]; b.PerGPU > 0 {
		fmt.Fprintf(w, "best placement%s: %s (%d GPUs): goodput %s requests/s, %.3f per GPU%s\n", budget, b.Pair, b.GPUs, fmtRate(b.Rate), b.PerGPU, whyBest(best, sw.GPUs))
	} else {
		fmt.Fprintf(w, "best placement%s: none: no pair meets the SLO at any rate swept (lower the rates or loosen --slo-*)\n", budget)
	}
}

// whyBest says what the best placement line would otherwise leave a
// reader to guess: that it uses fewer GPUs than the budget (the ranking is
// per GPU), and which pairs it ties with on goodput per GPU and what put
// it first (ranked's order).
func whyBest(best []sweep.PairGoodput, budget int) string {
	b := best[0]
	var out string
	if budget > b.GPUs {
		out = fmt.Sprintf("; it uses %d of the %d GPUs: pairs rank by goodput per GPU, and no larger pair has more", b.GPUs, budget)
	}
	var tied []string
	for _, g := range best[1:] {
		if g.PerGPU == b.PerGPU {
			tied = append(tied, g.Pair)
		}
	}
	if len(tied) == 0 {
		return out
	}
	n := best[1]
	out += fmt.Sprintf("; tied on goodput per GPU with %s", strings.Join(tied, ", "))
	switch {
	case b.BestRPS != n.BestRPS:
		x, y := apart(b.BestRPS, n.BestRPS, 3)
		out += fmt.Sprintf(", first on throughput per GPU at that rate (%s against %s's %s requests/s)", x, n.Pair, y)
	case b.P99 != n.P99 && !math.IsNaN(b.P99) && !math.IsNaN(n.P99):
		x, y := apart(b.P99, n.P99, 1)
		out += fmt.Sprintf(", first on TTFT p99 at that rate (%s against %s's %s ms)", x, n.Pair, y)
	default:
		out += fmt.Sprintf(", and with %s on every figure: first in the sweep's order", n.Pair)
	}
	return out
}

// apart prints two different figures with decimals (at least) digits, more
// when they would read the same.
func apart(a, b float64, decimals int) (string, string) {
	for d := decimals; d < 17; d++ {
		x, y := strconv.FormatFloat(a, 'f', d, 64), strconv.FormatFloat(b, 'f', d, 64)
		if x != y {
			return x, y
		}
	}
	return strconv.FormatFloat(a, 'g', -1, 64), strconv.FormatFloat(b, 'g', -1, 64)
}
