package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
	"github.com/rankrun/rankrun/internal/goodputout"
	"github.com/rankrun/rankrun/reqtrace"
	"github.com/rankrun/rankrun/sweep"
)

const goodputExamples = `  rankrun goodput --model llama-3-8b --hardware h100 --kv-sample 16 --ctx tp=1 --gen tp=1 --input 1024 --output 64 --requests 300
  rankrun goodput --model llama-3-70b --hardware h100 --ctx tp=4 --gen tp=4 --arrival trace=traces/AzureLLMInferenceTrace_conv.csv:span=5m
  rankrun goodput --model llama-3-70b --hardware h100 --kv-sample 32 --ctx tp=4 --gen tp=4 --slo-ttft 1s --slo-tpot 40ms --rate-lo 1 --rate-hi 8 --json
`

// goodputCmd finds one layout pair's goodput (DistServe: the highest
// Poisson arrival rate at which --slo-share of the requests meet both
// latency objectives) by bisection over the rate, each probe a run of
// --requests requests.
func goodputCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("goodput", "Find the goodput of one layout pair (--ctx, --gen): the highest Poisson arrival rate at which --slo-share of\n"+
		"the requests meet --slo-ttft and --slo-tpot (DistServe's definition), by bisection over the rate. Each probe is a run\n"+
		"of --requests requests at one rate (the sim backend by default); the table shows each probe's attainment with its\n"+
		"95% interval, and marks the probes whose interval holds the target share (another seed may decide them otherwise).",
		goodputExamples, stderr)
	var f runFlags
	shared := flag.NewFlagSet("shared", flag.ContinueOnError)
	f.Register(shared, true)
	f.Backend = "sim" // goodput's own default, shown as such by -h
	shared.VisitAll(func(fl *flag.Flag) {
		switch fl.Name {
		case "arrival":
			fs.Var(fl.Value, fl.Name, "unset: Poisson arrivals, the search sets their rate; or trace=FILE[:from=D][:span=D]: that trace window's lengths and times, the search sets its time scale (scale=K: K times the recorded rate)")
			fs.Lookup(fl.Name).DefValue = ""
		case "timeout":
			fs.Var(fl.Value, fl.Name, "deadline of each probe (> 0); unset: 10m plus four times the time its requests take to arrive at its rate; virtual time under sim")
			fs.Lookup(fl.Name).DefValue = "0s" // -h shows no fixed default: unset, it grows with the probe
		default:
			fs.Var(fl.Value, fl.Name, fl.Usage)
		}
	})
	var s goodput.SLO
	fs.DurationVar(&s.TTFT, "slo-ttft", 500e6, "SLO: a request's time to first token at most this")
	fs.DurationVar(&s.TPOT, "slo-tpot", 50e6, "SLO: a request's time per output token after the first at most this")
	fs.Float64Var(&s.Share, "slo-share", 0.9, "SLO: the share of requests that must meet both, in (0,1]")
	var o goodput.Options
	fs.Float64Var(&o.Lo, "rate-lo", 1, "the first rate probed, requests/s (> 0); halved while it fails (with a trace, unset: its recorded rate)")
	fs.Float64Var(&o.Hi, "rate-hi", 4, "the second rate probed (> --rate-lo); doubled while it passes (with a trace, unset: twice --rate-lo)")
	fs.Float64Var(&o.RelTol, "tol", 0.05, "stop when the bracket is this narrow, relative to its lower end, in (0,1)")
	fs.IntVar(&o.MaxProbes, "max-probes", 24, "most runs of the search (>= 2)")
	jsonOut := fs.Bool("json", false, "print the result as JSON on stdout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f.NoteSet(fs)
	// A trace: the search varies its time scale, from its recorded rate.
	var traceBase string
	var recorded float64
	var traceN int // the window's requests
	if f.Set["arrival"] {
		arr, err := executor.ParseArrival(f.Arrival)
		if err != nil {
			return usagef("--arrival: %v", err)
		}
		if arr.Kind != executor.Traced {
			return usagef("--arrival %s: goodput sets the arrival rate itself; give no --arrival (Poisson) or trace=FILE[:from=D][:span=D]", f.Arrival)
		}
		if arr.Trace.Poisson > 0 || arr.Trace.Scale != 1 {
			return usagef("--arrival %s: goodput sets the trace's time scale itself; drop scale= and poisson=", f.Arrival)
		}
		traceBase = f.Arrival
		ff := f // config sets an unset --timeout from the trace: the probes set their own
		first, err := ff.Config()
		if err != nil {
			return err
		}
		traceN = first.Workload.Requests
		if recorded = first.Workload.OfferedRate(); recorded <= 0 {
			return usagef("--arrival %s: the window's requests all arrive at one instant: there is no time scale to search (widen the window or raise --requests)", f.Arrival)
		}
		if !f.Set["rate-lo"] {
			o.Lo = recorded
		}
		if !f.Set["rate-hi"] {
			o.Hi = 2 * o.Lo
		}
		// A probe replays the window at scale rate/recorded, which must
		// stay within the scale's bounds.
		lo, hi := recorded/reqtrace.MaxScale, recorded*reqtrace.MaxScale
		for _, r := range []struct {
			flag string
			v    float64
		}{{"rate-lo", o.Lo}, {"rate-hi", o.Hi}} {
			if r.v < lo || r.v > hi {
				return usagef("--%s %g: on this trace (recorded %.4g requests/s) a rate must be in [%.4g, %.4g]: the trace's time scale in [1e-6, 1e6]",
					r.flag, r.v, recorded, lo, hi)
			}
		}
	}
	switch {
	case s.TTFT <= 0:
		return usagef("--slo-ttft %v: must be positive", s.TTFT)
	case s.TPOT <= 0:
		return usagef("--slo-tpot %v: must be positive", s.TPOT)
	case !(s.Share > 0 && s.Share <= 1):
		return usagef("--slo-share %v: must be in (0, 1]", s.Share)
	case !(o.Lo > 0):
		return usagef("--rate-lo %v: must be positive", o.Lo)
	case !(o.Hi > o.Lo):
		return usagef("--rate-hi %v: must be above --rate-lo (%v)", o.Hi, o.Lo)
	case o.Hi > executor.MaxRate:
		return usagef("--rate-hi %v: at most 1e7 requests/s (the workload's limit)", o.Hi)
	case f.Requests >= 1 && o.Lo < executor.MinRate(f.Requests):
		return usagef("--rate-lo %v: at least %.3g requests/s for --requests %d (their arrivals may span at most %.0g s)",
			o.Lo, executor.MinRate(f.Requests), f.Requests, executor.MaxArrivalSpan.Seconds())
	case !(o.RelTol > 0 && o.RelTol < 1):
		return usagef("--tol %v: must be in (0, 1)", o.RelTol)
	case o.MaxProbes < 2:
		return usagef("--max-probes %d: must be at least 2", o.MaxProbes)
	}
	// Doubling stops at the workload's limit, and so does halving (on a
	// trace: at its time scale's bounds).
	o.MaxRate = min(o.Hi*64, executor.MaxRate)
	if f.Requests >= 1 {
		o.MinRate = max(o.Lo/64, executor.MinRate(f.Requests))
	}
	if traceBase != "" {
		o.MaxRate = min(o.MaxRate, recorded*reqtrace.MaxScale)
		o.MinRate = max(o.Lo/64, recorded/reqtrace.MaxScale, executor.MinRate(traceN))
	}
	// --backend mpi is refused for what it is, on any build.
	backend := f.Backend
	if backend != "mpi" {
		var err error
		if backend, err = f.resolveBackend(); err != nil {
			return err
		}
	}
	if backend == "mpi" {
		return usagef("goodput: --backend mpi: the search runs its probes in this process (local or sim)")
	}
	// The first probe's configuration checks every flag before any run.
	probeCfg := func(rate float64) (executor.Config, error) {
		rf := f
		rf.Arrival = fmt.Sprintf("poisson=%g", rate)
		if traceBase != "" {
			rf.Arrival = traceBase + ":scale=" + strconv.FormatFloat(rate/recorded, 'g', -1, 64)
		}
		return rf.Config()
	}
	first, err := probeCfg(o.Lo)
	if err != nil {
		return err
	}
	log, err := newLogger(f.LogLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	f.NoteSimOnly(backend, stderr) // every check passed: the search starts
	ctx, stop := interruptible(context.Background())
	defer stop()
	probe := func(ctx context.Context, rate float64) (goodput.Attainment, error) {
		cfg, err := probeCfg(rate)
		if err != nil {
			return goodput.Attainment{}, err
		}
		cfg.Log = log
		tally := &sweep.Tally{SLO: s}
		cfg.Records, cfg.Sink = true, tally
		rf := f
		if !f.Set["timeout"] {
			// The requests take requests/rate to arrive: a probe's deadline
			// leaves room for that, four times over, beyond the default.
			rf.Timeout = f.Timeout + time.Duration(4*float64(cfg.Workload.Requests)/rate*float64(time.Second))
		}
		rep, err := rf.runIn(ctx, backend, cfg)
		att := goodput.Attainment{Met: tally.Met(), N: cfg.Workload.Requests}
		switch {
		case errors.Is(err, sim.ErrDeadline):
			// Requests still unfinished at the deadline met no SLO: the
			// rate's verdict, not the search's end.
			return att, nil
		case err != nil:
			return goodput.Attainment{}, err
		case rep.Error != nil:
			return goodput.Attainment{}, fmt.Errorf("the run failed: %s", rep.Error.Message)
		}
		// Requests that failed or were cancelled (an overloaded rate's
		// timeouts) count as not meeting the SLO.
		return att, nil
	}
	res, err := goodput.Find(ctx, s, probe, o)
	var cut *exitError
	if err != nil {
		ie, stopped := interrupted(ctx, err)
		if !stopped {
			return err
		}
		// The probes that finished are the result, said so.
		res.Why = fmt.Sprintf("%s after %d probes: the search did not finish", ie, len(res.Steps))
		cut = &exitError{code: ie.code(), msg: "goodput: " + res.Why}
	}
	out := goodputout.New(&first, s, res, traceBase, recorded)
	if *jsonOut {
		if err := out.JSON(stdout); err != nil {
			return err
		}
	} else {
		out.Text(stdout, s)
	}
	if cut != nil {
		return *cut
	}
	return nil
}
