package sweepout

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/sweep"
)

// Table prints one row per cell, then the goodput of each pair and the
// best placement when any cell has a rate, then every error.
func (sw Sweep) Table(w io.Writer) error {
	fmt.Fprintf(w, "sweep: %s\n", sw.Title)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	spread := sw.repeats() > 1
	head := "pair\tworkload\tstatus\tcompleted/failed\tthroughput rps\tper GPU rps\tTTFT p50 ms\tTTFT p99 ms\t"
	if spread {
		head += "TTFT p99 min..max ms\t"
	}
	fmt.Fprintln(tw, head+"TPOT p50 ms\tSLO met\tidle handover p99 ms\tpeak KV ctx/gen\tbytes verified\tleaked blocks\t")
	for _, r := range sw.Cells {
		rep, s := r.Reports[0], r.Summary
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%.1f\t%s\t%s\t%s\t", r.Pair.String(), r.Arrival, status(r), rep.RequestsCompleted, rep.RequestsFailed,
			s.Tput, fixed(s.TputPerGPU, 2), fixed(s.TTFTP50, 3), fixed(s.TTFTP99, 3))
		if spread {
			fmt.Fprintf(tw, "%s..%s\t", fixed(s.TTFTP99Min, 3), fixed(s.TTFTP99Max, 3))
		}
		fmt.Fprintf(tw, "%s\t%.0f%%\t%s\t%s\t%d\t%d\t\n", fixed(s.TPOTP50, 3), 100*s.Attain,
			distMs(rep.IdleHandoverMs, rep.IdleHandoverMs.P99), peakKV(rep), rep.BytesVerified, rep.LeakedBlocks)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	sw.goodputTable(w)
	for _, r := range sw.Cells {
		for i, rep := range r.Reports {
			for _, e := range rep.Errors {
				if spread {
					fmt.Fprintf(w, "error: %s %s (repeat %d): %s\n", r.Pair.String(), r.Arrival, i+1, e)
				} else {
					fmt.Fprintf(w, "error: %s %s: %s\n", r.Pair.String(), r.Arrival, e)
				}
			}
		}
	}
	return nil
}

func status(r *sweep.Cell) string {
	n := 0
	for i := range r.Reports {
		if r.FailedAt(i) {
			n++
		}
	}
	switch {
	case n == 0:
		return "ok"
	case len(r.Reports) == 1:
		return "FAILED"
	}
	return fmt.Sprintf("FAILED(%d/%d)", n, len(r.Reports))
}

func fixed(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func distMs(d executor.Dist, v float64) string {
	if d.N == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func peakKV(rep *executor.Report) string {
	ctx, gen := instanceUtil(rep)
	if math.IsNaN(ctx) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%/%.1f%%", 100*ctx, 100*gen)
}

// instanceUtil returns the peak KV utilisation of the CTX and GEN sides, NaN
// when the report has none.
func instanceUtil(rep *executor.Report) (ctx, gen float64) {
	ctx, gen = math.NaN(), math.NaN()
	for _, in := range rep.Instances {
		switch in.Role {
		case "ctx":
			ctx = in.PeakKVUtil
		case "gen":
			gen = in.PeakKVUtil
		}
	}
	return ctx, gen
}
