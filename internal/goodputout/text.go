package goodputout

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/rankrun/rankrun/goodput"
)

// Text prints the report for a reader: the search's setting, one row per
// probe with its verdict, the goodput, and the confidence a probe's
// requests give at s's share.
func (g Report) Text(w io.Writer, s goodput.SLO) {
	arrivals := "Poisson arrivals"
	if g.Trace != "" {
		arrivals = fmt.Sprintf("%s replayed at a time scale the search sets (scale 1: its recorded %.4g requests/s)", g.Trace, g.RecordedRPS)
	}
	fmt.Fprintf(w, "goodput of ctx %s -> gen %s (%d GPUs): %s, %s, %d requests a probe\n\n", g.Ctx, g.Gen, g.GPUs, g.SLO, arrivals, g.Requests)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	scaleCol := ""
	if g.Trace != "" {
		scaleCol = "scale\t"
	}
	fmt.Fprintln(tw, "probe\trate rps\t"+scaleCol+"met\tattainment\t95% interval\tverdict\t")
	for i, p := range g.Probes {
		verdict := "fails"
		if p.Pass {
			verdict = "meets"
		}
		if p.Unsure {
			verdict += " (unsure)"
		}
		scale := ""
		if g.Trace != "" {
			scale = fmt.Sprintf("%.4g\t", p.Scale)
		}
		fmt.Fprintf(tw, "%d\t%.4g\t%s%d/%d\t%.1f%%\t%.1f-%.1f%%\t%s\t\n", i+1, p.Rate, scale, p.Met, p.N, 100*p.Share, 100*p.Interval[0], 100*p.Interval[1], verdict)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\ngoodput: %.4g requests/s (%.4g per GPU); %s\n", g.Goodput, g.PerGPU, g.Why)
	if g.Trace != "" && g.RecordedRPS > 0 {
		fmt.Fprintf(w, "on the trace: time scale %.4g (its arrivals at %.4g x the recorded rate)\n", g.Goodput/g.RecordedRPS, g.Goodput/g.RecordedRPS)
	}
	need := goodput.RequestsFor(s.Share, 0.02, goodput.Z95)
	fmt.Fprintf(w, "confidence: with %d requests a probe, an attainment of %g%% has a 95%% interval of +-%.1f%%; +-2%% needs %d (--requests)\n",
		g.Requests, 100*s.Share, 100*g.HalfWidth, need)
}
