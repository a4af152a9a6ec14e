package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/mpienv"
	"github.com/rankrun/rankrun/internal/sweepout"
	"github.com/rankrun/rankrun/runspec"
	"github.com/rankrun/rankrun/sweep"
	"github.com/rankrun/rankrun/topology"
	"go.uber.org/zap"
)

const sweepExamples = `  rankrun sweep                                             # the default pairs, closed=4
  rankrun sweep --pair tp=1/tp=4 --pair tp=2/tp=2 --pair "dp=2,adp/tp=2" --requests 128
  rankrun sweep --pair tp=1/tp=4 --arrival closed=1 --arrival closed=8 --arrival rate=500 --csv out.csv
  rankrun sweep --pair tp=1/tp=1 --pair tp=2,pp=2/tp=4 --json sweep.json --plot sweep.svg
  rankrun sweep --backend sim --model llama-3-8b --hardware h100 --gpus 8 --input 1024 --output 64 --requests 24 \
      --arrival poisson=2,poisson=4,poisson=8 --slo-ttft 200ms --slo-tpot 20ms --plot grid.svg   # placement search
  rankrun sweep --backend sim --pair tp=1/tp=1 --arrival poisson=50 --repeat 5         # the spread of one cell
`

// defaultPairs are swept when no --pair is given.
var defaultPairs = []string{"tp=1/tp=1", "tp=1/tp=4", "tp=2/tp=2"}

// maxPlannedRuns is the largest sweep (cells x repeats) that runs without
// --yes.
const maxPlannedRuns = 5000

func sweepCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sweep", "Run each layout pair (--pair CTX/GEN, or every pair of a GPU budget: --gpus N) under each arrival pattern\n"+
		"(--arrival), in this process, and print a table; optionally write CSV, JSON (one report per run) and a plot.\n"+
		"With rate or poisson arrivals it also prints each pair's goodput per GPU (the highest rate at which --slo-share\n"+
		"of requests meet --slo-ttft and --slo-tpot) and names the best placement.\n"+
		"Without --pair or --gpus: "+strings.Join(defaultPairs, " ")+". Without --arrival: closed=4.", sweepExamples, stderr)
	var f runFlags
	// The shared flags, except --arrival, which the sweep makes repeatable.
	shared := flag.NewFlagSet("shared", flag.ContinueOnError)
	f.Register(shared, false)
	shared.VisitAll(func(fl *flag.Flag) {
		if fl.Name != "arrival" {
			fs.Var(fl.Value, fl.Name, fl.Usage)
		}
	})
	var g gridFlags
	g.register(fs)
	var pairs, arrivals runspec.MultiFlag
	fs.Var(&pairs, "pair", "layout pair CTX/GEN to run (repeatable), e.g. tp=1/tp=4 or \"dp=2,adp/tp=2\"")
	fs.Var(&arrivals, "arrival", "workload arrival pattern to run (repeatable; also comma-separated): burst | rate=R | poisson=R | closed=C | trace=FILE[:from=D][:span=D][:scale=K][:poisson=R] (a trace's rate: its requests over their replayed span)")
	yes := fs.Bool("yes", false, fmt.Sprintf("run a plan of more than %d runs (without it such a sweep is refused, saying how to narrow it)", maxPlannedRuns))
	csvOut := fs.String("csv", "", "write one CSV row per run to this file")
	jsonOut := fs.String("json", "", "write the runs' reports (a JSON array; no rank reports or traces) to this file")
	plotOut := fs.String("plot", "", "draw the sweep to this file (.svg or .png): TTFT p99 and throughput per pair, or with two or more rates "+
		"TTFT p99, TPOT and throughput per GPU against the rate and the goodput per GPU of the best pairs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f.NoteSet(fs)
	if err := g.validate(); err != nil {
		return err
	}
	// A sweep runs every rank in this process. Started by mpirun it would
	// run as N independent copies: refuse, whatever the build.
	if l := mpienv.Detect(); l.UnderMPI {
		return fmt.Errorf("sweep runs all its ranks in this process but was started by mpirun (rank %d of %d): "+
			"run the sweep without mpirun (under mpirun use rankrun run)", l.WorldRank, l.WorldSize)
	}
	arrs, err := sweepArrivals(arrivals)
	if err != nil {
		return err
	}
	if !*yes {
		g.maxPairs = max(1, maxPlannedRuns/(len(arrs)*g.repeat))
	}
	layoutPairs, err := f.sweepPairs(&g, pairs)
	if err != nil {
		return err
	}
	if cells := len(layoutPairs) * len(arrs) * g.repeat; cells > maxPlannedRuns && !*yes {
		size := fmt.Sprintf("%d runs (%d layout pairs", cells, len(layoutPairs))
		narrow := "fewer --pair, --arrival or --repeat"
		if g.gpus > 0 {
			narrow = "a smaller --gpus, --ctx-dims/--gen-dims, fewer --arrival or --repeat, or --pair"
			if len(layoutPairs) > g.maxPairs {
				// The grid's enumeration stopped at the bound: a floor.
				size = fmt.Sprintf("more than %d runs (more than %d layout pairs", g.maxPairs*len(arrs)*g.repeat, g.maxPairs)
			}
		}
		return usagef("sweep: the plan is %s x %d arrival patterns x %d repeats); more than %d runs needs --yes, or narrow it (%s)",
			size, len(arrs), g.repeat, maxPlannedRuns, narrow)
	}
	runs, err := f.sweepRuns(layoutPairs, arrs, g.repeat)
	if err != nil {
		return err
	}
	if err := checkSweepOutputs(*csvOut, *jsonOut, *plotOut); err != nil {
		return err
	}
	log, err := newLogger(f.LogLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	// --backend mpi is refused for what it is, on any build (resolving it
	// first told a build without MPI to rebuild with it).
	backend := f.Backend
	if backend != "mpi" {
		var err error
		if backend, err = f.resolveBackend(); err != nil {
			return err
		}
	}
	if backend == "mpi" {
		return usagef("sweep: --backend mpi: a sweep runs in this process (local or sim); run each point under mpirun with rankrun run")
	}
	if g.jobs > 1 && backend != "sim" {
		return usagef("--jobs %d: only --backend sim runs cells at once (wall-clock figures of the local backend would share the CPUs)", g.jobs)
	}
	f.NoteSimOnly(backend, stderr) // every check passed: the cells start
	ctx, stop := interruptible(context.Background())
	defer stop()
	done := f.runSweep(ctx, runs, backend, g, log, stderr)
	ie, stopped := interrupted(ctx, nil)
	if !stopped || len(done) == len(runs) {
		// Every cell ran to its end (a signal after the last one cut
		// nothing short): the whole sweep.
		sw := sweepout.Sweep{Cells: runs, SLO: g.slo, GPUs: g.gpus}
		sw.Title, sw.Short = sweepout.Title(runs, runspec.DescribeCompute)
		return finishSweep(sw, stdout, *csvOut, *jsonOut, *plotOut)
	}
	// Interrupted: the cells whose every repeat ran to its end before the
	// signal are the sweep's result, in every output asked for; the cells
	// cut short or never started are left out, and said so.
	what := fmt.Sprintf("sweep: %s after %d of %d cells", ie, len(done), len(runs))
	if len(done) == 0 {
		return exitError{code: ie.code(), msg: what + "; no cell finished, nothing written"}
	}
	sw := sweepout.Sweep{Cells: done, SLO: g.slo, GPUs: g.gpus}
	sw.Title, sw.Short = sweepout.Title(done, runspec.DescribeCompute)
	sw.Cut = fmt.Sprintf("%d of %d cells finished before the interrupt", len(done), len(runs))
	sw.Title += " (" + sw.Cut + ")"
	sw.Short += fmt.Sprintf(" (interrupted: %d of %d cells)", len(done), len(runs))
	fmt.Fprintf(stderr, "rankrun: %s; the table and outputs hold the %d finished (the first left out: %s %s)\n",
		what, len(done), firstLeftOut(runs, done).Pair, firstLeftOut(runs, done).Arrival)
	if err := finishSweep(sw, stdout, *csvOut, *jsonOut, *plotOut); err != nil {
		var ee exitError
		if !errors.As(err, &ee) {
			return err
		}
		fmt.Fprintf(stderr, "rankrun: %s\n", ee.msg)
	}
	return exitError{code: ie.code()}
}

// firstLeftOut is the first run of all that done (a subsequence of all)
// lacks.
func firstLeftOut(all, done []*sweep.Cell) *sweep.Cell {
	for i, r := range all {
		if i >= len(done) || done[i] != r {
			return r
		}
	}
	return all[len(all)-1]
}

// sweepArrivals splits the --arrival values (closed=4 when none).
func sweepArrivals(arrivals runspec.MultiFlag) ([]string, error) {
	if len(arrivals) == 0 {
		return []string{"closed=4"}, nil
	}
	var arrs []string
	for _, v := range arrivals {
		for i, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a == "" {
				return nil, usagef("--arrival %q: item %d is empty (a stray comma?)", v, i+1)
			}
			arrs = append(arrs, a)
		}
	}
	return arrs, nil
}

// sweepPairs is the layout pairs to run: --pair's, the grid of --gpus, or
// the defaults.
func (f *runFlags) sweepPairs(g *gridFlags, pairs runspec.MultiFlag) ([][2]string, error) {
	if g.gpus == 0 {
		for _, n := range []string{"ctx-dims", "gen-dims"} {
			if f.Set[n] {
				return nil, usagef("--%s applies to --gpus", n)
			}
		}
		if len(pairs) == 0 {
			pairs = defaultPairs
		}
		var out [][2]string
		for _, p := range pairs {
			ctxSpec, genSpec, ok := strings.Cut(p, "/")
			if !ok || strings.Contains(genSpec, "/") {
				return nil, usagef("--pair %q: want CTX/GEN, two layouts separated by one slash (e.g. tp=1/tp=4)", p)
			}
			if _, err := topology.ParseLayout(ctxSpec); err != nil {
				return nil, usagef("--pair %q: ctx: %v", p, err)
			}
			if _, err := topology.ParseLayout(genSpec); err != nil {
				return nil, usagef("--pair %q: gen: %v", p, err)
			}
			out = append(out, [2]string{ctxSpec, genSpec})
		}
		return out, nil
	}
	if len(pairs) > 0 {
		return nil, usagef("--gpus and --pair: give one of them (--gpus generates the pairs)")
	}
	geom := topology.Model{Layers: f.Layers, KVHeads: f.KVHeads, HeadDim: f.HeadDim, TokensPerBlock: f.TokensPerBlock, ElemBytes: f.ElemBytes}
	var place *costmodel.Placement
	if f.ModelName != "" {
		m, err := costmodel.ResolveModel(f.ModelName)
		if err != nil {
			return nil, usagef("--model: %v", err)
		}
		hw, err := f.HardwareProfile()
		if err != nil {
			return nil, err
		}
		if !hw.Compute() { // no memory to hold the model: every pair would be refused, for the wrong reason
			return nil, usagef("--model %s: --hardware %s has no compute figures (it models links only): pick %s or a hardware file",
				f.ModelName, f.Hardware, strings.Join(runspec.ComputeHardware(), ", "))
		}
		place, geom = &costmodel.Placement{Model: m, HW: hw}, m.Geometry(f.TokensPerBlock)
	}
	grid, err := g.gridPairs(geom, place)
	if err != nil {
		return nil, err
	}
	out := make([][2]string, len(grid))
	for i, p := range grid {
		out[i] = [2]string{p.Ctx.String(), p.Gen.String()}
	}
	return out, nil
}

// sweepRuns builds and checks every cell's configuration before the first
// run.
func (f *runFlags) sweepRuns(pairs [][2]string, arrs []string, repeat int) ([]*sweep.Cell, error) {
	var cells []*sweep.Cell
	for _, p := range pairs {
		for _, a := range arrs {
			rf := *f
			rf.Ctx, rf.Gen, rf.Arrival = p[0], p[1], a
			cfg, err := rf.Config()
			if err != nil {
				if ue, ok := asUsage(err); ok {
					return nil, usagef("--pair %q, --arrival %s: %v", p[0]+"/"+p[1], a, ue.error)
				}
				return nil, err
			}
			cells = append(cells, sweep.NewCell(cfg, repeat))
		}
	}
	return cells, nil
}

// runSweep runs every repeat of every cell (sweep.Run), g.jobs at a time
// (0: one per CPU under sim, one otherwise), with a progress bar, and
// returns the cells whose every repeat ran to its end: all of them, unless
// ctx ends first (an interrupt).
func (f *runFlags) runSweep(ctx context.Context, cells []*sweep.Cell, backend string, g gridFlags, log *zap.Logger, stderr io.Writer) []*sweep.Cell {
	jobs := g.jobs
	if jobs == 0 && backend != "sim" {
		jobs = 1
	}
	n := 0
	for _, c := range cells {
		n += len(c.Reports)
	}
	bar := newProgressBar("sweep", n, stderr)
	done := sweep.Run(ctx, cells, sweep.Options{Jobs: jobs, SLO: g.slo, Done: func(c *sweep.Cell, i int) {
		log.Debug("sweep run finished", zap.Stringer("pair", c.Pair), zap.String("arrival", c.Arrival), zap.Int("repeat", i))
		if bar != nil {
			bar.Describe(fmt.Sprintf("%s %s", c.Pair, c.Arrival))
			_ = bar.Add(1)
		}
	}}, func(ctx context.Context, cfg executor.Config, i int) (*executor.Report, error) {
		return f.runRepeat(ctx, cfg, i, backend, log)
	})
	if bar != nil {
		_ = bar.Finish()
	}
	return done
}

// runRepeat runs repeat i of a cell, cfg its configuration as sweep.Run
// gives it (the workload seed already --seed+i): the sim schedule seeds
// --seed+i too (--schedule-seed+i when set).
func (f *runFlags) runRepeat(ctx context.Context, cfg executor.Config, i int, backend string, log *zap.Logger) (*executor.Report, error) {
	rf := *f
	rf.Seed += uint64(i)
	if rf.ScheduleSeed != 0 {
		rf.ScheduleSeed += uint64(i)
	}
	cfg.Log = log
	return rf.runIn(ctx, backend, cfg)
}
