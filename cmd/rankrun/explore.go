package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/explore"
	"github.com/rankrun/rankrun/runspec"
	"github.com/rankrun/rankrun/scenario"
	"go.uber.org/zap"
)

const exploreExamples = `  rankrun explore --ctx tp=2 --gen tp=2,dp=2,adp --seeds 200
  rankrun explore --gen dp=2,adp --transfer sync --replay unsafe-idle-reap --strategy pct --shrink
  rankrun explore --scenario tests/multirank/testdata/fault-cancel-gen.txt --budget 30s
`

// searchFlags are explore's flags that shape the search, not the run: the
// ones --scenario takes.
var searchFlags = map[string]bool{
	"scenario": true, "with-replay": true, "seeds": true, "budget": true, "start": true, "shrink": true,
	"strategy": true, "pct-depth": true, "msg-jitter": true, "early-arrivals": true, "log-level": true, "backend": true,
}

// exploreCmd searches simulated schedules of one run (or one scenario) for a
// failure and prints the seed, what failed and the line that replays it.
func exploreCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("explore", "Run a job in the simulation backend under many rank schedules (a seeded random walk, or PCT) and stop at\n"+
		"the first that fails: a desync, a collective timeout, a deadlock, a stall, a leaked or pinned block, a byte that does\n"+
		"not verify, a lost request, or a status check that waited in its local poll (none should). Messages in flight may arrive\n"+
		"at any poll before their receiver's blocking wait (--early-arrivals). Prints the schedule seed, what failed\n"+
		"and a command line that replays exactly that schedule; --shrink then looks for the smallest reproducer.", exploreExamples, stderr)
	var f runFlags
	f.Register(fs, true)
	seeds := fs.Int("seeds", 100, "schedules to try (>= 1)")
	budget := fs.Duration("budget", 0, "wall-clock budget of the search (0: none; the search ends at --seeds or --budget, whichever first)")
	start := fs.Uint64("start", 1, "the first schedule seed (>= 1; seeds start at 1)")
	shrink := fs.Bool("shrink", false, "after a failure, look for a smaller case that fails the same way")
	file := fs.String("scenario", "", "explore this scenario file (its expectations judge every schedule) instead of the run flags, which it refuses beside it")
	withReplay := fs.Bool("with-replay", false, "with --scenario: explore the variant with its replay under test on")
	var expects runspec.MultiFlag
	fs.Var(&expects, "expect", `what every schedule must show, in scenario syntax (repeatable; default: "ok" and every request completed)`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f.NoteSet(fs)
	if f.Set["backend"] && f.Backend != "sim" && f.Backend != "auto" {
		return usagef("--backend %s: explore runs every schedule in the simulation backend; drop --backend (or give sim)", f.Backend)
	}
	if *seeds < 1 {
		return usagef("--seeds %d: must be at least 1", *seeds)
	}
	if *budget < 0 {
		return usagef("--budget %v: must not be negative", *budget)
	}
	if *start < 1 {
		return usagef("--start %d: must be at least 1 (schedule seeds start at 1)", *start)
	}
	if *start > math.MaxUint64-uint64(*seeds-1) {
		return usagef("--start %d: with --seeds %d the seeds would pass 2^64-1 and wrap to 0", *start, *seeds)
	}
	st, err := sim.ParseStrategy(f.Strategy)
	if err != nil {
		return usagef("--strategy: %v", err)
	}
	if f.MsgJitter < 0 {
		return usagef("--msg-jitter %v: must not be negative", f.MsgJitter)
	}
	if f.PCTDepth < 1 {
		return usagef("--pct-depth %d: must be at least 1", f.PCTDepth)
	}
	var s scenario.Scenario
	if *file != "" {
		// The file is the run: a flag that would describe it is refused,
		// not ignored (a search that looked like it explored a replay or
		// a layout reported "no failure" on the file's own).
		var run []string
		fs.Visit(func(fl *flag.Flag) {
			if !searchFlags[fl.Name] {
				run = append(run, "--"+fl.Name)
			}
		})
		if len(run) > 0 {
			return usagef("%s: --scenario %s is the run, as the file writes it; drop %s (or edit the file)",
				strings.Join(run, ", "), *file, map[bool]string{true: "them", false: "it"}[len(run) > 1])
		}
		if s, err = scenario.ParseFile(*file); err != nil {
			return usageError{err}
		}
		if *withReplay && s.ReplayUnderTest == "" {
			return usagef("--with-replay: %s has no replay-under-test", *file)
		}
	} else {
		if *withReplay {
			return usagef("--with-replay applies to --scenario")
		}
		if s, err = scenario.FromSpec("explore "+f.Ctx+" -> "+f.Gen, f.Spec, expects); err != nil {
			return err
		}
	}
	if cfg, err := s.Config(*withReplay); err == nil {
		// A replay this search cannot show passes every schedule: say so
		// before the minutes it takes.
		for _, n := range executor.ReplayGaps(&cfg) {
			fmt.Fprintf(stderr, "rankrun: note: %s\n", n)
		}
	}
	// Explore jitters messages by default (20 us); --msg-jitter 0 turns it off.
	// So are early arrivals; --early-arrivals=false turns them off.
	jitter, fixed := f.MsgJitter, false
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "msg-jitter" && jitter == 0 {
			jitter = -1
		}
		if fl.Name == "early-arrivals" {
			fixed = !f.EarlyArrivals
		}
	})
	o := explore.Options{Seeds: *seeds, Budget: *budget, Start: *start, Strategy: st, Depth: f.PCTDepth, Jitter: jitter, FixedArrivals: fixed, Shrink: *shrink}
	log, err := newLogger(f.LogLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	bar := newProgressBar("explore", *seeds, stderr)
	o.Progress = func(seed uint64, fl *explore.Failure) {
		log.Debug("explore schedule finished", zap.Uint64("seed", seed), zap.Bool("failed", fl != nil))
		if bar != nil {
			bar.Describe(fmt.Sprintf("explore seed %d", seed))
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		defer func() { _ = bar.Finish() }()
	}
	ctx, stop := interruptible(context.Background())
	defer stop()
	wall := time.Now()
	res := explore.Run(ctx, s, *withReplay, o)
	if ie, ok := interrupted(ctx, nil); ok && res.Interrupted && res.First == nil {
		// What was searched, and where to go on from.
		msg := fmt.Sprintf("explore: %s after %d schedules (%s strategy, seeds %d..%d) in %.1f s: no failure; resume with --start %d",
			ie, res.Schedules, st, *start, *start+uint64(res.Schedules)-1, time.Since(wall).Seconds(), *start+uint64(res.Schedules))
		if res.Schedules == 0 {
			msg = fmt.Sprintf("explore: %s before the first schedule ended; resume with --start %d", ie, *start)
		}
		fmt.Fprintln(stdout, msg)
		return exitError{code: ie.code()}
	}
	if res.First == nil {
		fmt.Fprintf(stdout, "explore: no failure in %d schedules (%s strategy, seeds %d..%d) in %.1f s\n",
			res.Schedules, st, *start, *start+uint64(res.Schedules)-1, time.Since(wall).Seconds())
		return nil
	}
	fmt.Fprintf(stdout, "explore: FAIL after %d schedules: %s\n", res.Schedules, res.First)
	if ie, ok := interrupted(ctx, nil); ok && res.Interrupted {
		// The failure stands; the shrinking was cut short.
		if res.Shrunk == 0 {
			fmt.Fprintf(stdout, "explore: shrinking %s before a smaller case failed the same way: the reproducer above is the smallest found\n", ie)
		} else {
			s := res.Smallest.Scenario
			fmt.Fprintf(stdout, "explore: shrinking %s: the smallest so far (%d steps smaller: ctx %s, gen %s, %d requests): %s\n",
				ie, res.Shrunk, s.Ctx, s.Gen, s.Requests, res.Smallest)
		}
		return exitError{code: ie.code()}
	}
	if *shrink {
		if res.Shrunk == 0 {
			fmt.Fprintf(stdout, "explore: no smaller case fails the same way: this is the smallest reproducer\n")
		} else {
			s := res.Smallest.Scenario
			fmt.Fprintf(stdout, "explore: smallest reproducer (%d steps smaller: ctx %s, gen %s, %d requests): %s\n",
				res.Shrunk, s.Ctx, s.Gen, s.Requests, res.Smallest)
		}
	}
	return exitError{code: 1}
}
