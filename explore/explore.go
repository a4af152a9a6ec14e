// Package explore searches rank schedules for bugs instead of sampling the
// machine's timing: it runs one scenario in the simulation backend under
// many schedules (a seeded random walk, or PCT priority schedules with d
// change points, with seeded message jitter that keeps MPI's order), and
// stops at the first schedule whose outcome breaks the scenario's
// expectations or one of the oracles: a desync, a collective timeout, a
// deadlock, a stall, a leaked or pinned block, a byte that does not
// verify, a pool invariant, a lost request, a status check that slept
// out its whole poll interval (seed 000's symptom), or one that waited in
// its local poll at all (#15139's blocking outcomes). The failing schedule
// replays exactly (one seed, one run); explore then shrinks the case
// (fewer requests, smaller layouts) and reports the smallest reproducer.
//
// SearchProgram does the same for a user's own multi-rank function;
// package exploretest calls it from a Go test (this package imports no
// testing code).
//
// It knows scenarios (package scenario) and the simulation (comm/sim);
// nothing below it knows it.
package explore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/scenario"
)

// Options configures a search.
type Options struct {
	Seeds    int           // schedules to try (100 when 0)
	Budget   time.Duration // wall-clock budget; the search ends at whichever comes first (0: none)
	Start    uint64        // the first schedule seed (1 when 0)
	Strategy sim.Strategy
	Depth    int           // PCT's d (3 when 0)
	Jitter   time.Duration // message jitter (20 us when 0; negative: none)
	// FixedArrivals turns off early arrivals (on by default: a message in
	// flight may arrive at any point before its receiver's blocking wait,
	// so what ranks observe locally differs between schedules; see
	// sim.Config.EarlyArrivals).
	FixedArrivals bool
	// Shrink looks for a smaller reproducer after a failure, trying up to
	// ShrinkSeeds schedules per smaller case (20 when 0).
	Shrink      bool
	ShrinkSeeds int
	// Progress, when set, hears about every schedule tried.
	Progress func(seed uint64, f *Failure)
	// Observe, when set, hears every schedule's outcome, failing or not
	// (what a coverage table reports).
	Observe func(seed uint64, o scenario.Outcome)
}

func (o *Options) fill() {
	if o.Seeds <= 0 {
		o.Seeds = 100
	}
	if o.Start == 0 {
		o.Start = 1
	}
	if o.Depth <= 0 {
		o.Depth = 3
	}
	if o.Jitter == 0 {
		o.Jitter = 20 * time.Microsecond
	} else if o.Jitter < 0 {
		o.Jitter = 0
	}
	if o.ShrinkSeeds <= 0 {
		o.ShrinkSeeds = 20
	}
}

// Failure is one schedule that broke the scenario.
type Failure struct {
	Scenario scenario.Scenario // as run, its schedule pinned (ScheduleSeed, Strategy, MsgJitter)
	Replay   bool              // the variant with the replay under test on
	Why      []string          // what broke: the verdict's reasons and the oracles'
	Outcome  scenario.Outcome
}

// Command is the one line that replays this exact schedule.
func (f *Failure) Command() string { return f.Scenario.CommandLineOn("sim", f.Replay) }

func (f *Failure) String() string {
	return fmt.Sprintf("schedule seed %d (%s): %s\n  replay: %s", f.Scenario.ScheduleSeed, f.Scenario.Strategy,
		strings.Join(f.Why, "; "), f.Command())
}

// Result is what a search found.
type Result struct {
	Schedules int           // schedules tried before the first failure (or in all)
	First     *Failure      // the first failing schedule (nil: none found)
	Smallest  *Failure      // the smallest reproducer shrinking found (First when none smaller)
	Shrunk    int           // smaller cases that still failed on the way to Smallest
	Wall      time.Duration // wall time the search took
	// Interrupted: ctx ended the search (a signal) before --seeds or the
	// budget; the schedule it cut short is not counted, so the search
	// resumes at Start + Schedules. With First set, ctx ended the
	// shrinking: Smallest is the smallest failing case found so far.
	Interrupted bool
}

// Run searches schedules of one variant of s (withReplay: with its replay
// under test on) for a failure, as Options says.
func Run(ctx context.Context, s scenario.Scenario, withReplay bool, o Options) Result {
	o.fill()
	start := time.Now()
	var res Result
	for i := range o.Seeds {
		if ctx.Err() != nil {
			res.Interrupted = true
			break
		}
		if o.Budget > 0 && time.Since(start) > o.Budget {
			break
		}
		seed := o.Start + uint64(i)
		f := Try(ctx, s, withReplay, seed, o)
		if ctx.Err() != nil {
			// The run ended because the search did: not a verdict.
			res.Interrupted = true
			break
		}
		res.Schedules++
		if o.Progress != nil {
			o.Progress(seed, f)
		}
		if f != nil {
			res.First, res.Smallest = f, f
			break
		}
	}
	if res.First != nil && o.Shrink {
		res.Smallest, res.Shrunk = shrink(ctx, res.First, o)
		res.Interrupted = ctx.Err() != nil // Smallest is the smallest so far
	}
	res.Wall = time.Since(start)
	return res
}

// Try runs one schedule of one variant (seed, with o's strategy and
// jitter) and returns its failure, or nil.
func Try(ctx context.Context, s scenario.Scenario, withReplay bool, seed uint64, o Options) *Failure {
	o.fill()
	s.Backend = "sim"
	s.ScheduleSeed, s.Strategy, s.MsgJitter, s.EarlyArrivals = seed, o.Strategy, o.Jitter, !o.FixedArrivals
	if o.Strategy == sim.PCT {
		s.PCTDepth = o.Depth
	}
	f, out := replay(ctx, s, withReplay)
	if o.Observe != nil {
		o.Observe(seed, out)
	}
	return f
}

// Replay runs s as pinned (its schedule seed, strategy, depth and jitter):
// the run a failure's command line reproduces. It returns the failure, or
// nil when the run passes.
func Replay(ctx context.Context, s scenario.Scenario, withReplay bool) *Failure {
	f, _ := replay(ctx, s, withReplay)
	return f
}

func replay(ctx context.Context, s scenario.Scenario, withReplay bool) (*Failure, scenario.Outcome) {
	s.Backend = "sim"
	out := scenario.RunVariant(ctx, s, withReplay, scenario.WithBackend("sim"))
	why := s.Verdict(out, withReplay)
	why = append(why, oracles(&s, out)...)
	if len(why) == 0 {
		return nil, out
	}
	return &Failure{Scenario: s, Replay: withReplay, Why: why, Outcome: out}, out
}

// oracles are checks beyond a scenario's own expectations that hold for
// every healthy run in virtual time.
func oracles(s *scenario.Scenario, o scenario.Outcome) []string {
	if o.Report == nil {
		return nil
	}
	var why []string
	// Seed 000: with the clamp, an idle check never waits in its local
	// poll (at_least is 0 on the idle path, and a target is never above
	// the sessions held); a poll that waited a whole sender wait slice
	// waited for a session that could not exist.
	sleptOut := false
	if len(o.Report.Instances) > 0 && s.SenderWaitSlice > 0 {
		if w := o.Report.Instances[0].MaxPollWaitMs; w >= float64(s.SenderWaitSlice)/float64(time.Millisecond) {
			why = append(why, fmt.Sprintf("a CTX status check's local poll waited %.0f ms, the whole sender wait slice (seed 000's symptom)", w))
			sleptOut = true
		}
	}
	// TensorRT-LLM #15139 (the blocking-outcomes replay): no row of the
	// progress policy waits for an outcome in its local poll (every check
	// is at_least 0: the poll makes one pass and reads no clock), so in
	// virtual time every poll wait is exactly zero. A poll that waited at
	// all held its rank back from its next step for transfers in flight:
	// an async CTX no longer overlaps its sends with its next prefill.
	for _, in := range o.Report.Instances {
		if in.MaxPollWaitMs > 0 && !sleptOut {
			why = append(why, fmt.Sprintf("a %s status check's local poll waited %.3f ms for transfers in flight: a check that blocks on outcomes (the symptom of TensorRT-LLM #15139 and #17299; every row of the policy polls at_least 0)", in.Role, in.MaxPollWaitMs))
		}
	}
	return why
}
