package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/runspec"
	"github.com/rankrun/rankrun/sweep"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// sweepWriter renders a finished sweep: its table, CSV and plot.
type sweepWriter struct {
	runs  []*sweep.Cell
	slo   slo
	gpus  int    // the --gpus budget, 0 for --pair sweeps
	title string // the workload and the compute model, for every output
	short string // the same in a line a plot can hold
	cut   string // after an interrupt: which cells the outputs hold ("" when all)
}

// finish prints the table, writes the outputs asked for, and fails the
// sweep when any run failed.
func (sw sweepWriter) finish(stdout io.Writer, csvOut, jsonOut, plotOut string) error {
	if err := sw.table(stdout); err != nil {
		return err
	}
	var errs []error
	if csvOut != "" {
		errs = append(errs, sw.csv(csvOut))
	}
	if jsonOut != "" {
		errs = append(errs, writeSweepJSON(jsonOut, sw.runs))
	}
	if plotOut != "" {
		errs = append(errs, sw.plot(plotOut))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	bad, total := 0, 0
	for _, r := range sw.runs {
		for i := range r.Reports {
			total++
			if r.FailedAt(i) {
				bad++
			}
		}
	}
	if bad > 0 {
		return exitError{code: 1, msg: fmt.Sprintf("sweep: %d of %d runs failed or leaked KV blocks (see the error lines)", bad, total)}
	}
	return nil
}

// sweepTitle names what every cell of the sweep shares: the workload but
// its arrival, the cost model, the repeats; short is a shorter form for
// plots.
func sweepTitle(runs []*sweep.Cell) (title, short string) {
	if len(runs) == 0 {
		return "", ""
	}
	c := &runs[0].Config
	w := c.Workload
	s := fmt.Sprintf("%d requests, %d input tokens", w.Requests, w.InputTokens)
	if w.InputJitter > 0 {
		s += fmt.Sprintf(" (+-%g%%)", 100*w.InputJitter)
	}
	s += fmt.Sprintf(", %d output tokens", w.OutputTokens)
	if t := executor.TraceSummary(c); t != nil {
		s = fmt.Sprintf("%d requests of trace %s, its lengths (input p50 %d p99 %d, output p50 %d p99 %d tokens); a trace's rate is its requests over their replayed span (scale=K multiplies it)",
			w.Requests, t.File, t.InputP50, t.InputP99, t.OutputP50, t.OutputP99)
	}
	short = s
	if pc, ok := c.Compute.(sweep.CostModel); ok {
		short += fmt.Sprintf("; %s on %s", pc.Model.Name, pc.HW.Name)
	}
	if d := runspec.DescribeCompute(c); d != "" {
		s += "; " + d
	}
	if n := len(runs[0].Reports); n > 1 {
		s += fmt.Sprintf("; medians of %d repeats", n)
		short += fmt.Sprintf("; medians of %d repeats", n)
	}
	return s, short
}

func (sw sweepWriter) repeats() int { return len(sw.runs[0].Reports) }

// table prints one row per cell, then the goodput of each pair and the best
// placement when any cell has a rate, then every error.
func (sw sweepWriter) table(w io.Writer) error {
	fmt.Fprintf(w, "sweep: %s\n", sw.title)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	spread := sw.repeats() > 1
	head := "pair\tworkload\tstatus\tcompleted/failed\tthroughput rps\tper GPU rps\tTTFT p50 ms\tTTFT p99 ms\t"
	if spread {
		head += "TTFT p99 min..max ms\t"
	}
	fmt.Fprintln(tw, head+"TPOT p50 ms\tSLO met\tidle handover p99 ms\tpeak KV ctx/gen\tbytes verified\tleaked blocks\t")
	for _, r := range sw.runs {
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
	for _, r := range sw.runs {
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

// goodputTable prints the best pairs by goodput per GPU and names the best
// placement; nothing when no cell has a rate.
func (sw sweepWriter) goodputTable(w io.Writer) {
	gs := sw.goodputs()
	if gs == nil {
		return
	}
	best := sweep.Ranked(gs)
	const top = 10
	fmt.Fprintf(w, "\ngoodput per GPU: the highest rate at which %s, over GPUs (rates swept: %s)\n", sw.slo, strings.Join(sw.rates(), " "))
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
	if sw.gpus > 0 {
		budget = fmt.Sprintf(" for %d GPUs", sw.gpus)
	}
	if sw.cut != "" {
		budget += " among the " + sw.cut
	}
	if b := best[0]; b.PerGPU > 0 {
		fmt.Fprintf(w, "best placement%s: %s (%d GPUs): goodput %s requests/s, %.3f per GPU%s\n", budget, b.Pair, b.GPUs, fmtRate(b.Rate), b.PerGPU, whyBest(best, sw.gpus))
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

// goodputs is every pair's goodput, nil when no cell has a rate.
func (sw sweepWriter) goodputs() []sweep.PairGoodput {
	for _, r := range sw.runs {
		if r.Rate > 0 {
			return sweep.Goodputs(sw.runs, sw.slo)
		}
	}
	return nil
}

// rates lists the swept rates in order of first appearance.
func (sw sweepWriter) rates() []string {
	var out []string
	seen := map[float64]bool{}
	for _, r := range sw.runs {
		if r.Rate > 0 && !seen[r.Rate] {
			seen[r.Rate] = true
			out = append(out, fmtRate(r.Rate))
		}
	}
	return out
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

var sweepCSVHeader = []string{"ctx", "gen", "arrival", "requests_completed", "requests_failed", "requests_cancelled",
	"throughput_rps", "ttft_p50_ms", "ttft_p99_ms", "idle_handover_p50_ms", "idle_handover_p99_ms",
	"peak_kv_util_ctx", "peak_kv_util_gen", "bytes_verified", "leaked_blocks", "pinned_blocks_at_end", "duration_s", "error",
	"status", "repeat", "gpus", "throughput_per_gpu_rps", "tpot_p50_ms", "slo_attainment", "goodput_rps", "goodput_per_gpu_rps"}

// csv writes one row per run (each repeat its own row); the goodput columns
// are the pair's.
func (sw sweepWriter) csv(path string) error {
	var b strings.Builder
	cw := csv.NewWriter(&b)
	_ = cw.Write(sweepCSVHeader)
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	opt := func(d executor.Dist, v float64) string {
		if d.N == 0 {
			return ""
		}
		return num(v)
	}
	gp := map[string]sweep.PairGoodput{}
	for _, g := range sw.goodputs() {
		gp[g.Pair] = g
	}
	for _, r := range sw.runs {
		for i, rep := range r.Reports {
			ctx, gen := instanceUtil(rep)
			st, g := r.Stats[i], gp[r.Pair.String()]
			ok := "ok"
			if r.FailedAt(i) {
				ok = "failed"
			}
			goodRate, goodPer := "", ""
			if _, has := gp[r.Pair.String()]; has {
				goodRate, goodPer = num(g.Rate), num(g.PerGPU)
			}
			_ = cw.Write([]string{rep.Ctx, rep.Gen, r.Arrival, strconv.Itoa(rep.RequestsCompleted), strconv.Itoa(rep.RequestsFailed),
				strconv.Itoa(rep.RequestsCancelled), num(rep.ThroughputRPS), opt(rep.TTFTMs, rep.TTFTMs.P50), opt(rep.TTFTMs, rep.TTFTMs.P99),
				opt(rep.IdleHandoverMs, rep.IdleHandoverMs.P50), opt(rep.IdleHandoverMs, rep.IdleHandoverMs.P99), num(ctx), num(gen),
				strconv.FormatInt(rep.BytesVerified, 10), strconv.Itoa(rep.LeakedBlocks), strconv.Itoa(rep.PinnedBlocksAtEnd),
				num(rep.DurationS), strings.Join(rep.Errors, "; "),
				ok, strconv.Itoa(i + 1), strconv.Itoa(r.GPUs()), num(st.TputPerGPU), num(st.TPOTP50), num(st.Attain), goodRate, goodPer})
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("--csv: %w", err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("--csv: %w", err)
	}
	return nil
}

// writeSweepJSON writes every run's report (each repeat's), in order.
func writeSweepJSON(path string, runs []*sweep.Cell) error {
	var reps []*executor.Report
	for _, r := range runs {
		reps = append(reps, r.Reports...)
	}
	b, err := json.MarshalIndent(reps, "", "  ")
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

// newSweepBar returns the sweep's progress bar (nil: not a terminal).
func newSweepBar(n int, stderr io.Writer) *progressbar.ProgressBar {
	return newProgressBar("sweep", n, stderr)
}

// newProgressBar returns a progress bar of n steps (with rate and ETA) on
// stderr when stderr is a terminal, else nil: quiet when piped. A variable
// so that a test can be a terminal.
var newProgressBar = func(what string, n int, stderr io.Writer) *progressbar.ProgressBar {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return progressBarOn(what, n, stderr)
}

func progressBarOn(what string, n int, stderr io.Writer) *progressbar.ProgressBar {
	return progressbar.NewOptions(n, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString(progressUnit[what]),
		progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish(), progressbar.OptionSetRenderBlankState(true))
}

// progressUnit is what each command's bar counts, for its rate.
var progressUnit = map[string]string{"run": "req", "sweep": "run", "explore": "schedule"}

// checkSweepOutputs checks every output path before anything runs: each can
// be written, none is given twice, and the plot's extension is known.
func checkSweepOutputs(csvPath, jsonPath, plotPath string) error {
	seen := map[string]string{}
	for _, o := range []struct{ flag, path string }{{"--csv", csvPath}, {"--json", jsonPath}, {"--plot", plotPath}} {
		if o.path == "" {
			continue
		}
		if o.flag == "--plot" {
			if ext := strings.ToLower(filepath.Ext(o.path)); ext != ".svg" && ext != ".png" {
				return usagef("--plot %s: the file name must end in .svg or .png", o.path)
			}
		}
		abs, err := filepath.Abs(o.path)
		if err != nil {
			abs = o.path
		}
		if prev, ok := seen[abs]; ok {
			return usagef("%s %s: the same file as %s", o.flag, o.path, prev)
		}
		seen[abs] = o.flag
		if err := probeWritable(o.path); err != nil {
			return usagef("%s: %v", o.flag, err)
		}
	}
	return nil
}

// probeWritable checks that path can be written, leaving no file behind
// that was not there before.
func probeWritable(path string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Remove(path)
}

// fmtRate is a rate as %g wrote it before traces (a rate as the user gave
// it: 2, 0.25, 1e+06, 3.33333333), or to 6 significant digits where it has
// more than 12 characters (a trace's rate, 4.77856).
func fmtRate(r float64) string {
	s := strconv.FormatFloat(r, 'g', -1, 64)
	if len(s) > 12 {
		s = strconv.FormatFloat(r, 'g', 6, 64)
	}
	return s
}
