package explore

// Schedule search for any multi-rank program: the function a user runs
// with launch.Run (or local.Run, or under mpirun) runs here in simulation,
// under seeded random and PCT schedules with message jitter, and every
// schedule is held against oracles that hold for any correct program.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/sim"
)

// ProgramOptions configures a search over a program's schedules. The zero
// value tries 200 schedules, half random walks and half PCT, with 20 us of
// message jitter and early arrivals, checked collectives bounded at 10 s
// of virtual time.
type ProgramOptions struct {
	Seeds  int           // schedules to try (200 when 0)
	Start  uint64        // the first schedule seed (1 when 0)
	Budget time.Duration // wall-clock budget for the search (0: none); the first schedule always runs
	// Strategy forces one strategy (default: random and PCT in turn).
	Strategy *sim.Strategy
	Depth    int           // PCT's d (3 when 0)
	Jitter   time.Duration // message jitter (20 us when 0; negative: none)
	// FixedArrivals turns off early arrivals (sim.Config.EarlyArrivals):
	// by default a message in flight may arrive at any point between its
	// send and its receiver's blocking wait, so a rank-local Test, a
	// bounded poll or a queue length sees it arrived on one rank and not
	// on another, in some schedule, as ranks' speeds make it on a real
	// machine.
	FixedArrivals bool
	// Timeout bounds every collective (virtual; 10 s when 0), Deadline
	// the whole run (virtual; 1 h when 0): past it the run is a hang.
	Timeout, Deadline time.Duration
	Unchecked         bool
	// AnySite lets checked collectives entered from different call sites
	// pair up (comm.CheckConfig.AnySite).
	AnySite bool
	// Fabric is the link model (none when zero).
	Fabric sim.Fabric
	// MinRanks, when in [1, n), lets a failure shrink: the same search on
	// fewer ranks, down to MinRanks, for the smallest world that fails
	// (the program must run on any size in between).
	MinRanks int
	// Setup, when set, is called once per schedule before the ranks start
	// (to reset state the program's ranks share, such as a test's
	// counters).
	Setup func()
	// ReplayArgs are the test's own flags a replay line must repeat (for
	// a test that a flag switches to another variant), e.g. "-unclamped".
	ReplayArgs string
	// Stuck is how long a schedule may go without one scheduling step,
	// in wall time, before the search looks at what its goroutines do
	// (10 s when 0). When none of them can run (a rank blocked outside the
	// simulator on a channel, mutex or sleep its ranks share, every other
	// goroutine of the run waiting too), virtual time cannot move: the
	// search names the schedule stuck. It is no bound on a slow run: a run
	// that keeps stepping is waited for, and so is one whose goroutines
	// still run (rank-local work, or a loaded host that gives them no CPU)
	// up to Spin.
	Stuck time.Duration
	// Spin is how long a schedule may go without a step while a goroutine
	// of its run can still run, before the search names it stuck (60 s
	// when 0; never less than Stuck): a rank that spins without a comm
	// call never yields. A verdict past Spin is the one a loaded host can
	// cause, so it says the goroutines were running.
	Spin time.Duration
}

// ProgramFailure is the first schedule a search found failing.
type ProgramFailure struct {
	Ranks    int
	Seed     uint64
	Strategy sim.Strategy
	Why      []string // what broke: the first rank's error, then the oracles'
	Result   sim.Result
	// Stuck: the schedule stopped stepping (ProgramOptions.Stuck, Spin); its
	// ranks' goroutines may be left running, so the search ends there.
	Stuck bool
}

func (f *ProgramFailure) Error() string {
	ranks := fmt.Sprintf("%d ranks", f.Ranks)
	if f.Ranks == 1 {
		ranks = "1 rank"
	}
	return fmt.Sprintf("schedule seed %d (%s, %s): %s", f.Seed, f.Strategy, ranks, strings.Join(f.Why, "; "))
}

// ProgramResult is what a search did.
type ProgramResult struct {
	// Err is bad options (no schedule ran): one line naming the field
	// and the rule.
	Err       error
	Schedules int
	First     *ProgramFailure // nil: none failed
	Smallest  *ProgramFailure // with MinRanks: the smallest world that failed (First when none smaller)
	Wall      time.Duration
}

// SearchProgram runs fn on n simulated ranks under o's schedules and
// returns the first failing schedule, if any. A schedule fails when any
// rank returns an error (the program's own assertions, a desync, a
// collective timeout, a panic: each named with its rank), the world
// deadlocks (every rank named, those that returned included), the run
// outlives its deadline, a rank returns with point-to-point requests it
// never completed or never saw end, or goroutines the ranks started are
// still running after the run.
func SearchProgram(ctx context.Context, n int, fn func(ctx context.Context, c comm.Comm) error, o ProgramOptions) ProgramResult {
	var res ProgramResult
	switch {
	case n < 1:
		res.Err = fmt.Errorf("%w: explore: %d ranks: want at least 1", comm.ErrBadArgument, n)
	case fn == nil:
		res.Err = fmt.Errorf("%w: explore: nil program", comm.ErrBadArgument)
	case o.Seeds < 0:
		res.Err = fmt.Errorf("%w: explore: Seeds %d: want 0 (the default, 200) or more", comm.ErrBadArgument, o.Seeds)
	case o.MinRanks < 0 || o.MinRanks > n:
		res.Err = fmt.Errorf("%w: explore: MinRanks %d: want 0 (no shrinking) to the %d ranks", comm.ErrBadArgument, o.MinRanks, n)
	case o.Depth < 0:
		res.Err = fmt.Errorf("%w: explore: Depth %d: want 0 (the default, 3) or more", comm.ErrBadArgument, o.Depth)
	default:
		for _, d := range []struct {
			name string
			v    time.Duration
			def  string
		}{{"Budget", o.Budget, "none"}, {"Timeout", o.Timeout, "10s"}, {"Deadline", o.Deadline, "1h"}, {"Stuck", o.Stuck, "10s"}, {"Spin", o.Spin, "1m"}} {
			if d.v < 0 {
				res.Err = fmt.Errorf("%w: explore: %s %v: want 0 (the default, %s) or more", comm.ErrBadArgument, d.name, d.v, d.def)
				break
			}
		}
	}
	if res.Err != nil {
		return res
	}
	o.fill()
	start := time.Now()
	over := func() bool { return ctx.Err() != nil || (o.Budget > 0 && time.Since(start) > o.Budget) }
	for i := range o.Seeds {
		if i > 0 && over() {
			break
		}
		seed := o.Start + uint64(i)
		res.Schedules++
		if f := tryProgram(ctx, n, fn, o, seed, o.strategy(i)); f != nil {
			res.First, res.Smallest = f, f
			break
		}
	}
	if res.First != nil && !res.First.Stuck && o.MinRanks >= 1 && o.MinRanks < n {
		for m := o.MinRanks; m < n && res.Smallest == res.First && !over(); m++ {
			for i := range min(o.Seeds, 50) {
				if over() {
					break
				}
				f := tryProgram(ctx, m, fn, o, o.Start+uint64(i), o.strategy(i))
				if f != nil && f.Stuck {
					break // its goroutines may be running: no more schedules
				}
				if f != nil {
					res.Smallest = f
					break
				}
			}
		}
	}
	res.Wall = time.Since(start)
	return res
}

func (o *ProgramOptions) fill() {
	if o.Seeds <= 0 {
		o.Seeds = 200
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
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Deadline <= 0 {
		o.Deadline = time.Hour
	}
	if o.Stuck <= 0 {
		o.Stuck = 10 * time.Second
	}
	if o.Spin <= 0 {
		o.Spin = time.Minute
	}
	o.Spin = max(o.Spin, o.Stuck)
}

func (o *ProgramOptions) strategy(i int) sim.Strategy {
	if o.Strategy != nil {
		return *o.Strategy
	}
	if i%2 == 1 {
		return sim.PCT
	}
	return sim.RandomWalk
}

// tryProgram runs one schedule and returns its failure, or nil.
func tryProgram(ctx context.Context, n int, fn func(ctx context.Context, c comm.Comm) error, o ProgramOptions, seed uint64, st sim.Strategy) *ProgramFailure {
	if o.Setup != nil {
		o.Setup()
	}
	before := liveIDs()
	prog := new(sim.Progress)
	cfg := sim.Config{Seed: seed, Strategy: st, Depth: o.Depth, Checked: !o.Unchecked, AnySite: o.AnySite, Timeout: o.Timeout, Jitter: o.Jitter,
		EarlyArrivals: !o.FixedArrivals, Deadline: o.Deadline, Fabric: o.Fabric, Progress: prog}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done, root, exited := make(chan sim.Result, 1), make(chan uint64, 1), make(chan struct{})
	go func() {
		defer close(exited) // then it only returns: not a goroutine the run left
		root <- currentID() // the run's goroutines are this one's family
		done <- sim.Run(rctx, n, cfg, func(ctx context.Context, c comm.Comm, _ clock.Clock) error { return fn(ctx, c) })
	}()
	res, stuck := awaitRun(ctx, done, prog, <-root, o.Stuck, o.Spin)
	if stuck != "" {
		// The run stopped stepping: cancel it, and give its ranks a
		// moment to return (one blocked outside the simulator never will).
		cancel()
		why := []string{stuck}
		grace := max(o.Stuck/2, time.Second)
		select {
		case res = <-done:
		case <-time.After(grace):
			why = append(why, fmt.Sprintf("the ranks did not return within %v of being cancelled: their goroutines are left running, and the search stops here", grace))
		}
		return &ProgramFailure{Ranks: n, Seed: seed, Strategy: st, Why: why, Result: res, Stuck: true}
	}
	var why []string
	if err := res.Err(); err != nil {
		switch {
		case errors.Is(err, sim.ErrDeadline):
			why = append(why, fmt.Sprintf("hang: the run did not end within %v of virtual time: %v", o.Deadline, err))
		default:
			why = append(why, err.Error())
		}
	}
	// Requests left behind by a run that failed are its consequence (the
	// ranks the failure cancelled left theirs): named only when nothing
	// else failed.
	if len(why) == 0 {
		for _, u := range res.Unfinished {
			why = append(why, "left behind: "+u.String())
		}
	}
	<-exited
	if left := leaked(before, o.Spin); len(left) > 0 {
		why = append(why, fmt.Sprintf("goroutines the ranks started are still running: %d, the first %s", len(left), left[0].describe()))
	}
	if len(why) == 0 {
		return nil
	}
	return &ProgramFailure{Ranks: n, Seed: seed, Strategy: st, Why: why, Result: res}
}

// awaitRun waits for a simulated run's result. While it runs it watches
// the step count. When the count has not moved for stuck and no goroutine
// of the run (root's family) can run, the run cannot move: it returns why,
// with the stacks of the ranks outside the simulator. While one of them
// can still run it waits on, up to spin without a step, and then names
// the goroutines that kept running. Once ctx is done (the search was
// interrupted) a run that does not step within stuck is named whatever
// its goroutines do.
func awaitRun(ctx context.Context, done <-chan sim.Result, prog *sim.Progress, root uint64, stuck, spin time.Duration) (sim.Result, string) {
	t := time.NewTimer(stuck)
	defer t.Stop()
	interrupted := ctx.Done()
	last, moved := prog.Steps(), time.Now()
	for {
		select {
		case res := <-done:
			return res, ""
		case <-interrupted:
			interrupted, spin = nil, stuck
			continue
		case <-t.C:
		}
		if now := prog.Steps(); now != last {
			last, moved = now, time.Now()
			t.Reset(stuck)
			continue
		}
		// The snapshot stops the world: a run that is moving has the
		// rank coroutine that holds the simulator's baton running or
		// runnable in it (the driver and the other ranks wait in a
		// coroutine switch), so one whose goroutines all wait cannot move.
		all := goroutines()
		run := family(all, root)
		if !slices.ContainsFunc(run, func(g goroutine) bool { return g.id == root }) {
			// The run has ended (its last step, the last rank returning,
			// counts no scheduling step): its root sent the result before
			// it returned. (A root still returning is runnable: waited for.)
			return <-done, ""
		}
		quiet := time.Since(moved).Round(time.Millisecond)
		var working []goroutine
		for _, g := range append(run, orphans(all)...) {
			if g.canRun() {
				working = append(working, g)
			}
		}
		switch {
		case len(working) == 0:
			return sim.Result{}, fmt.Sprintf("stuck: no scheduling step for %v of wall time after %d steps, and no goroutine of the run can run: "+
				"a rank is blocked outside the simulator (a channel, mutex or sleep its ranks share), so virtual time cannot move%s",
				quiet, last, stacks("the rank goroutines outside the simulator", run, outsideSim))
		case quiet >= spin:
			return sim.Result{}, fmt.Sprintf("stuck: no scheduling step for %v of wall time after %d steps while goroutines of the run kept running "+
				"or sat in a system call (ProgramOptions.Spin): a rank spins, or works that long, without a comm call, so virtual time cannot move "+
				"(or this host gave the run no CPU for that long)%s",
				quiet, last, stacks("the goroutines that kept running", working, func(goroutine) bool { return true }))
		}
		t.Reset(stuck)
	}
}

// outsideSim: g is a rank's goroutine whose top frame (past the runtime's)
// is not in the simulator, where a rank parks between steps.
func outsideSim(g goroutine) bool {
	if !strings.Contains(g.stack, "comm/sim.(*world).runRank") {
		return false
	}
	// Function lines are 1, 3, 5, ... (each followed by its file): the
	// first outside the runtime (and the coroutine switch a parked rank
	// waits in, iter.Pull's) says where the rank is.
	lines := strings.Split(g.stack, "\n")
	for i := 1; i < len(lines); i += 2 {
		if !strings.HasPrefix(lines[i], "runtime.") && !strings.HasPrefix(lines[i], "iter.") {
			return !strings.Contains(lines[i], "rankrun/comm/sim.")
		}
	}
	return true
}

// stacks renders the first two of gs that pick keeps, 13 lines each,
// under title ("" when none).
func stacks(title string, gs []goroutine, pick func(goroutine) bool) string {
	var out []string
	for _, g := range gs {
		if !pick(g) {
			continue
		}
		lines := strings.Split(g.stack, "\n")
		out = append(out, strings.Join(lines[:min(len(lines), 13)], "\n"))
		if len(out) == 2 {
			break
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + title + ":\n" + strings.Join(out, "\n\n")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n\n")
	return s
}
