package explore

// Schedule search for any multi-rank program: the function a user runs
// with launch.Run (or local.Run, or under mpirun) runs here in simulation,
// under seeded random and PCT schedules with message jitter, and every
// schedule is held against oracles that hold for any correct program.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/sim"
)

// The flags a failure's replay line sets (go test ... -rankrun.seed=N):
// with -rankrun.seed, Program runs that one schedule.
var (
	replaySeed     = flag.Uint64("rankrun.seed", 0, "explore.Program: run only this schedule seed (from a failure's replay line)")
	replayStrategy = flag.String("rankrun.strategy", "random", "explore.Program: the replayed schedule's strategy (random or pct)")
	replayRanks    = flag.Int("rankrun.ranks", 0, "explore.Program: the replayed schedule's world size (0: the test's)")
)

// ProgramOptions configures a search over a program's schedules. The zero
// value tries 200 schedules, half random walks and half PCT, with 20 us of
// message jitter, checked collectives bounded at 10 s of virtual time.
type ProgramOptions struct {
	Seeds  int           // schedules to try (200 when 0)
	Start  uint64        // the first schedule seed (1 when 0)
	Budget time.Duration // wall-clock budget for the search (0: none); the first schedule always runs
	// Strategy forces one strategy (default: random and PCT in turn).
	Strategy *sim.Strategy
	Depth    int           // PCT's d (3 when 0)
	Jitter   time.Duration // message jitter (20 us when 0; negative: none)
	// Timeout bounds every collective (virtual; 10 s when 0), Deadline
	// the whole run (virtual; 1 h when 0): past it the run is a hang.
	Timeout, Deadline time.Duration
	Unchecked         bool
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
}

// ProgramFailure is the first schedule a search found failing.
type ProgramFailure struct {
	Ranks    int
	Seed     uint64
	Strategy sim.Strategy
	Why      []string // what broke: the first rank's error, then the oracles'
	Result   sim.Result
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
	o.fill()
	start := time.Now()
	var res ProgramResult
	for i := range o.Seeds {
		if ctx.Err() != nil || (i > 0 && o.Budget > 0 && time.Since(start) > o.Budget) {
			break
		}
		seed := o.Start + uint64(i)
		res.Schedules++
		if f := tryProgram(ctx, n, fn, o, seed, o.strategy(i)); f != nil {
			res.First, res.Smallest = f, f
			break
		}
	}
	if res.First != nil && o.MinRanks >= 1 && o.MinRanks < n {
		for m := o.MinRanks; m < n && res.Smallest == res.First; m++ {
			for i := range min(o.Seeds, 50) {
				if f := tryProgram(ctx, m, fn, o, o.Start+uint64(i), o.strategy(i)); f != nil {
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
	before := goleak.IgnoreCurrent()
	cfg := sim.Config{Seed: seed, Strategy: st, Depth: o.Depth, Checked: !o.Unchecked, Timeout: o.Timeout, Jitter: o.Jitter,
		Deadline: o.Deadline, Fabric: o.Fabric}
	res := sim.Run(ctx, n, cfg, func(ctx context.Context, c comm.Comm, _ clock.Clock) error { return fn(ctx, c) })
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
	if err := goleak.Find(before); err != nil {
		why = append(why, "goroutines the ranks started are still running: "+firstLine(err.Error()))
	}
	if len(why) == 0 {
		return nil
	}
	return &ProgramFailure{Ranks: n, Seed: seed, Strategy: st, Why: why, Result: res}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n\n")
	return s
}

// Program runs fn on n simulated ranks under many schedules (see
// SearchProgram) and fails t with the first failing schedule's errors and
// the one command that replays exactly that schedule; run by that command
// (-rankrun.seed), it runs that schedule only. It is the way a test asks
// "does my program deadlock or desync under any schedule?".
func Program(t testing.TB, n int, fn func(ctx context.Context, c comm.Comm) error, o ProgramOptions) ProgramResult {
	t.Helper()
	if *replaySeed != 0 {
		st, err := sim.ParseStrategy(*replayStrategy)
		if err != nil {
			t.Fatal(err)
		}
		o.Seeds, o.Start, o.Strategy, o.Budget = 1, *replaySeed, &st, 0
		if *replayRanks > 0 {
			n = *replayRanks
		}
	}
	res := SearchProgram(context.Background(), n, fn, o)
	if f := res.Smallest; f != nil {
		msg := f.Error()
		if res.First != res.Smallest {
			msg = fmt.Sprintf("%s\n  (first found on %d ranks at seed %d)", msg, res.First.Ranks, res.First.Seed)
		}
		t.Fatalf("explore.Program: %s\n  replay: %s", msg, replayCommand(t, f, o.ReplayArgs))
	}
	return res
}

// replayCommand is the go test line that replays f in t's package.
func replayCommand(t testing.TB, f *ProgramFailure, extra string) string {
	pkg := "."
	if wd, err := os.Getwd(); err == nil {
		if root := moduleRoot(wd); root != "" {
			if rel, err := filepath.Rel(root, wd); err == nil && rel != "." {
				pkg = "./" + filepath.ToSlash(rel)
			}
		}
	}
	name := t.Name()
	if i := strings.IndexByte(name, '/'); i >= 0 {
		name = name[:i] // the top-level test (its subtests run with it)
	}
	line := fmt.Sprintf("go test -run '^%s$' %s -rankrun.seed=%d -rankrun.strategy=%s -rankrun.ranks=%d", name, pkg, f.Seed, f.Strategy, f.Ranks)
	if extra != "" {
		line += " " + extra
	}
	return line
}

// moduleRoot is the directory of the go.mod above dir ("" when none).
func moduleRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}
