package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/topology"
)

const sweepExamples = `  rankrun sweep                                             # the default pairs, closed=4
  rankrun sweep --pair tp=1/tp=4 --pair tp=2/tp=2 --pair "dp=2,adp/tp=2" --requests 128
  rankrun sweep --pair tp=1/tp=4 --arrival closed=1 --arrival closed=8 --arrival rate=500 --csv out.csv
  rankrun sweep --pair tp=1/tp=1 --pair tp=2,pp=2/tp=4 --json sweep.json --plot sweep.svg
`

// defaultPairs are swept when no --pair is given.
var defaultPairs = []string{"tp=1/tp=1", "tp=1/tp=4", "tp=2/tp=2"}

// sweepRun is one point of a sweep: a layout pair under one arrival pattern.
type sweepRun struct {
	pair    string // CTX/GEN, normalised
	arrival string
	cfg     executor.Config
	rep     *executor.Report // always set after the run (synthesised on error)
	err     error            // the run's own error, if it returned one
}

// failed reports whether the run errored, leaked or pinned blocks.
func (r *sweepRun) failed() bool { return r.err != nil || r.rep == nil || !r.rep.OK() }

func sweepCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sweep", "Run each layout pair (--pair CTX/GEN) under each arrival pattern (--arrival), one after another\n"+
		"in this process, and print a table; optionally write CSV, JSON (one report per run) and a plot.\n"+
		"Without --pair: "+strings.Join(defaultPairs, " ")+". Without --arrival: closed=4.", sweepExamples, stderr)
	var f runFlags
	// The shared flags, except --arrival, which the sweep makes repeatable.
	shared := flag.NewFlagSet("shared", flag.ContinueOnError)
	f.register(shared, false)
	shared.VisitAll(func(fl *flag.Flag) {
		if fl.Name != "arrival" {
			fs.Var(fl.Value, fl.Name, fl.Usage)
		}
	})
	var pairs, arrivals multiFlag
	fs.Var(&pairs, "pair", "layout pair CTX/GEN to run (repeatable), e.g. tp=1/tp=4 or \"dp=2,adp/tp=2\"")
	fs.Var(&arrivals, "arrival", "workload arrival pattern to run (repeatable; also comma-separated): burst | rate=R | poisson=R | closed=C")
	csvOut := fs.String("csv", "", "write one CSV row per run to this file")
	jsonOut := fs.String("json", "", "write the runs' reports (a JSON array; no rank reports or traces) to this file")
	plotOut := fs.String("plot", "", "draw TTFT p99 and throughput per layout pair to this file (.svg or .png)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f.noteSet(fs)
	f.sweepSample = true
	// A sweep runs every rank in this process. Started by mpirun it would
	// run as N independent copies: refuse, whatever the build.
	if l := comm.DetectLaunch(); l.UnderMPI {
		return fmt.Errorf("sweep runs all its ranks in this process but was started by mpirun (rank %d of %d): "+
			"run the sweep without mpirun (under mpirun use rankrun run)", l.WorldRank, l.WorldSize)
	}
	if len(pairs) == 0 {
		pairs = defaultPairs
	}
	var arrs []string
	for _, v := range arrivals {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				arrs = append(arrs, a)
			}
		}
	}
	if len(arrivals) == 0 {
		arrs = []string{"closed=4"}
	}
	if len(arrs) == 0 {
		return usagef("--arrival: no arrival pattern given")
	}

	// Every configuration is checked before the first run.
	var runs []*sweepRun
	for _, p := range pairs {
		ctxSpec, genSpec, ok := strings.Cut(p, "/")
		if !ok || strings.Contains(genSpec, "/") {
			return usagef("--pair %q: want CTX/GEN, two layouts separated by one slash (e.g. tp=1/tp=4)", p)
		}
		cl, err := topology.ParseLayout(ctxSpec)
		if err != nil {
			return usagef("--pair %q: ctx: %v", p, err)
		}
		gl, err := topology.ParseLayout(genSpec)
		if err != nil {
			return usagef("--pair %q: gen: %v", p, err)
		}
		for _, a := range arrs {
			rf := f
			rf.ctx, rf.gen, rf.arrival = ctxSpec, genSpec, a
			cfg, err := rf.config()
			if err != nil {
				var ue usageError
				if errors.As(err, &ue) {
					return usagef("--pair %q, --arrival %s: %v", p, a, ue.error)
				}
				return err
			}
			runs = append(runs, &sweepRun{pair: cl.String() + "/" + gl.String(), arrival: cfg.Workload.Arrival.String(), cfg: cfg})
		}
	}
	if err := checkSweepOutputs(*csvOut, *jsonOut, *plotOut); err != nil {
		return err
	}
	log, err := newLogger(f.logLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	backend, err := f.resolveBackend()
	if err != nil {
		return err
	}
	if backend == "mpi" {
		return usagef("sweep: --backend mpi: a sweep runs in this process (local or sim); run each point under mpirun with rankrun run")
	}
	bar := newSweepBar(len(runs), stderr)
	for _, r := range runs {
		if bar != nil {
			bar.Describe(fmt.Sprintf("%s %s", r.pair, r.arrival))
		}
		r.cfg.Log = log
		r.rep, r.err = f.runInProcess(backend, r.cfg)
		if r.rep == nil {
			r.rep = failedReport(&r.cfg, r.err)
		}
		r.rep.Ranks_ = nil // no per-rank reports or traces in a sweep's outputs
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}

	writeSweepTable(stdout, runs)
	var errs []error
	if *csvOut != "" {
		errs = append(errs, writeSweepCSV(*csvOut, runs))
	}
	if *jsonOut != "" {
		errs = append(errs, writeSweepJSON(*jsonOut, runs))
	}
	if *plotOut != "" {
		errs = append(errs, writeSweepPlot(*plotOut, runs))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	bad := 0
	for _, r := range runs {
		if r.failed() {
			bad++
		}
	}
	if bad > 0 {
		return exitError{code: 1, msg: fmt.Sprintf("sweep: %d of %d runs failed or leaked KV blocks (see the error lines)", bad, len(runs))}
	}
	return nil
}

// newSweepBar returns a progress bar on stderr when stderr is a terminal,
// else nil.
func newSweepBar(n int, stderr io.Writer) *progressbar.ProgressBar {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return progressbar.NewOptions(n, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("sweep"),
		progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true))
}

// failedReport stands for a run that returned an error instead of a report,
// so that every output has one entry per run.
func failedReport(cfg *executor.Config, err error) *executor.Report {
	msg := "no report"
	if err != nil {
		msg = err.Error()
	}
	w := cfg.Workload
	return &executor.Report{Ctx: cfg.Ctx.String(), Gen: cfg.Gen.String(), Ranks: cfg.Ranks(), Mode: cfg.Mode.String(),
		Workload: fmt.Sprintf("%d requests, %d input tokens, %d output tokens, %s", w.Requests, w.InputTokens, w.OutputTokens, w.Arrival),
		Replays:  cfg.Replays.String(), Faults: []string{}, Errors: []string{msg}, Requests: []executor.RequestRecord{}}
}

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

func writeSweepTable(w io.Writer, runs []*sweepRun) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pair\tworkload\tcompleted/failed\tthroughput rps\tTTFT p50 ms\tTTFT p99 ms\tidle handover p99 ms\tpeak KV ctx/gen\tbytes verified\tleaked blocks\t")
	for _, r := range runs {
		rep := r.rep
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%.1f\t%s\t%s\t%s\t%s\t%d\t%d\t\n", r.pair, r.arrival, rep.RequestsCompleted, rep.RequestsFailed,
			rep.ThroughputRPS, distMs(rep.TTFTMs, rep.TTFTMs.P50), distMs(rep.TTFTMs, rep.TTFTMs.P99),
			distMs(rep.IdleHandoverMs, rep.IdleHandoverMs.P99), peakKV(rep), rep.BytesVerified, rep.LeakedBlocks)
	}
	_ = tw.Flush()
	for _, r := range runs {
		for _, e := range r.rep.Errors {
			fmt.Fprintf(w, "error: %s %s: %s\n", r.pair, r.arrival, e)
		}
	}
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
	"peak_kv_util_ctx", "peak_kv_util_gen", "bytes_verified", "leaked_blocks", "pinned_blocks_at_end", "duration_s", "error"}

func writeSweepCSV(path string, runs []*sweepRun) error {
	var b strings.Builder
	cw := csv.NewWriter(&b)
	_ = cw.Write(sweepCSVHeader)
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	opt := func(d executor.Dist, v float64) string {
		if d.N == 0 {
			return ""
		}
		return num(v)
	}
	for _, r := range runs {
		rep := r.rep
		ctx, gen := instanceUtil(rep)
		util := func(v float64) string {
			if math.IsNaN(v) {
				return ""
			}
			return num(v)
		}
		_ = cw.Write([]string{rep.Ctx, rep.Gen, r.arrival, strconv.Itoa(rep.RequestsCompleted), strconv.Itoa(rep.RequestsFailed),
			strconv.Itoa(rep.RequestsCancelled), num(rep.ThroughputRPS), opt(rep.TTFTMs, rep.TTFTMs.P50), opt(rep.TTFTMs, rep.TTFTMs.P99),
			opt(rep.IdleHandoverMs, rep.IdleHandoverMs.P50), opt(rep.IdleHandoverMs, rep.IdleHandoverMs.P99), util(ctx), util(gen),
			strconv.FormatInt(rep.BytesVerified, 10), strconv.Itoa(rep.LeakedBlocks), strconv.Itoa(rep.PinnedBlocksAtEnd),
			num(rep.DurationS), strings.Join(rep.Errors, "; ")})
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

func writeSweepJSON(path string, runs []*sweepRun) error {
	reps := make([]*executor.Report, len(runs))
	for i, r := range runs {
		reps[i] = r.rep
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

// writeSweepPlot draws two panels side by side: TTFT p99 and throughput per
// layout pair, one bar per workload in each group.
func writeSweepPlot(path string, runs []*sweepRun) error {
	var pairs, arrs []string
	idx := func(list *[]string, s string) int {
		for i, x := range *list {
			if x == s {
				return i
			}
		}
		*list = append(*list, s)
		return len(*list) - 1
	}
	for _, r := range runs {
		idx(&pairs, r.pair)
		idx(&arrs, r.arrival)
	}
	ttft := make([]plotter.Values, len(arrs))
	rps := make([]plotter.Values, len(arrs))
	for i := range arrs {
		ttft[i], rps[i] = make(plotter.Values, len(pairs)), make(plotter.Values, len(pairs))
	}
	for _, r := range runs {
		a, p := idx(&arrs, r.arrival), idx(&pairs, r.pair)
		ttft[a][p], rps[a][p] = r.rep.TTFTMs.P99, r.rep.ThroughputRPS
	}
	panel := func(title, ylabel string, vals []plotter.Values) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		p.X.Label.Text = "layout pair (ctx/gen)"
		p.Y.Min = 0
		width := vg.Points(math.Min(24, 120/float64(len(arrs))))
		for i, v := range vals {
			bc, err := plotter.NewBarChart(v, width)
			if err != nil {
				return nil, err
			}
			bc.Color = plotutil.Color(i)
			bc.LineStyle.Width = 0
			bc.Offset = vg.Length(float64(i)-float64(len(vals)-1)/2) * width
			p.Add(bc)
			if len(vals) > 1 {
				p.Legend.Add(arrs[i], bc)
			}
		}
		// Headroom above the tallest bar for the legend, and room either
		// side of the outer groups.
		top := 0.0
		for _, v := range vals {
			for _, x := range v {
				top = math.Max(top, x)
			}
		}
		if top > 0 {
			p.Y.Max = top * 1.3
		}
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs = vg.Inch / 8
		p.NominalX(pairs...)
		p.X.Min, p.X.Max = -0.6, float64(len(pairs))-0.4
		if len(pairs) > 3 {
			p.X.Tick.Label.Rotation = math.Pi / 6
			p.X.Tick.Label.XAlign = draw.XRight
			p.X.Tick.Label.YAlign = draw.YCenter
		}
		return p, nil
	}
	left, err := panel("TTFT p99", "ms", ttft)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	right, err := panel("Throughput", "requests/s", rps)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	w, h := 12*vg.Inch, 4.5*vg.Inch
	var canvas vg.CanvasWriterTo
	if strings.ToLower(filepath.Ext(path)) == ".png" {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	} else {
		canvas = vgsvg.New(w, h)
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 2, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8,
		PadLeft: vg.Inch / 8, PadRight: vg.Inch / 4}
	cells := plot.Align([][]*plot.Plot{{left, right}}, tiles, dc)
	left.Draw(cells[0][0])
	right.Draw(cells[0][1])
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if _, err := canvas.WriteTo(out); err != nil {
		_ = out.Close()
		return fmt.Errorf("--plot: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}
