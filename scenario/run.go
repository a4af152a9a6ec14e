package scenario

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/launch"
)

// hangGrace is how long Run waits past a real-time run's deadline for the
// ranks to return before it calls the run hung.
const hangGrace = 10 * time.Second

// DefaultWallLimit is how much wall time a simulated run may take before
// the runner gives up on the host (WithWallLimit): a simulation's deadline
// is virtual, so wall time never makes it hung, only the host too slow to
// finish it.
const DefaultWallLimit = 3 * time.Minute

// Result is the verdict on one scenario on one backend.
type Result struct {
	Scenario *Scenario
	Backend  string
	Pass     bool
	// Reason says why it failed (every mismatch, "; "-separated), or what
	// it showed when it passed.
	Reason string
	// Off is the run as written; On the run with the replay under test on
	// (nil without one).
	Off *Outcome
	On  *Outcome
}

// Hung reports whether a run of the scenario did not return.
func (r Result) Hung() bool { return (r.Off != nil && r.Off.Hung) || (r.On != nil && r.On.Hung) }

// HostGaveUp reports whether a simulated run was stopped at the wall limit
// (WithWallLimit): no verdict either way.
func (r Result) HostGaveUp() bool {
	return (r.Off != nil && r.Off.HostGaveUp) || (r.On != nil && r.On.HostGaveUp)
}

func (r Result) String() string {
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s %s [%s]: %s", verdict, r.Scenario.Label(), r.Backend, r.Reason)
}

// Option adjusts a run.
type Option func(*runOpts)

type runOpts struct {
	log       *zap.Logger
	backend   string
	simCfg    func(*sim.Config)
	wallLimit time.Duration
}

// WithLogger gives the runs a logger (default: none).
func WithLogger(l *zap.Logger) Option { return func(o *runOpts) { o.log = l } }

// WithBackend runs on an in-process backend: local (the default) or sim.
func WithBackend(b string) Option { return func(o *runOpts) { o.backend = b } }

// WithSim adjusts the simulation a sim run uses (after SimConfig).
func WithSim(f func(*sim.Config)) Option { return func(o *runOpts) { o.simCfg = f } }

// WithWallLimit bounds the wall time of a simulated run (DefaultWallLimit
// when 0). Past it the runner stops the run and reports that the host gave
// up (Outcome.HostGaveUp), which is no verdict on the scenario: in
// simulation only virtual time decides (its deadline is the scenario's
// timeout), so a run that is slow on the host is slow, never hung.
func WithWallLimit(d time.Duration) Option { return func(o *runOpts) { o.wallLimit = d } }

func options(opts []Option) runOpts {
	o := runOpts{backend: "local", wallLimit: DefaultWallLimit}
	for _, f := range opts {
		f(&o)
	}
	if o.wallLimit <= 0 {
		o.wallLimit = DefaultWallLimit
	}
	return o
}

// Run runs s in-process, checked, and compares the outcome with its
// expectations; with a replay under test it runs a second time with the
// replay on. Every run has a deadline (s.Timeout); a run that has not
// returned shortly after it is reported as a hang, naming the scenario.
func Run(ctx context.Context, s Scenario, opts ...Option) Result {
	o := options(opts)
	res := Result{Scenario: &s, Backend: o.backend}
	off := runOnce(ctx, &s, false, o)
	res.Off = &off
	var why []string
	for _, w := range s.Verdict(off, false) {
		why = append(why, "as written: "+w)
	}
	shown := []string{"as written: " + off.Summary()}
	if s.ReplayUnderTest != "" {
		on := runOnce(ctx, &s, true, o)
		res.On = &on
		for _, w := range s.Verdict(on, true) {
			why = append(why, "with "+string(s.ReplayUnderTest)+": "+w)
		}
		shown = append(shown, "with "+string(s.ReplayUnderTest)+": "+on.Summary())
		// A proof must discriminate: what the replay must show may not
		// also hold without it.
		if !off.Hung && !off.HostGaveUp && len(s.Verdict(off, true)) == 0 {
			why = append(why, "expect-with-replay also holds with "+string(s.ReplayUnderTest)+" off: the scenario proves nothing")
		}
	}
	res.Pass = len(why) == 0
	if res.Pass {
		res.Reason = strings.Join(shown, " | ")
	} else {
		res.Reason = strings.Join(why, "; ")
		onFailed := false
		for _, w := range why {
			onFailed = onFailed || strings.HasPrefix(w, "with ")
		}
		res.Reason += fmt.Sprintf(" (reproduce: %s)", s.CommandLineOn(o.backend, onFailed))
	}
	return res
}

// RunVariant runs one variant of s in-process, checked, under its
// deadline (a hang is reported as such).
func RunVariant(ctx context.Context, s Scenario, withReplay bool, opts ...Option) Outcome {
	return runOnce(ctx, &s, withReplay, options(opts))
}

// SimConfig is the simulation a scenario runs in: its seed, checked, its
// collective timeout and link model, its deadline, all virtual. Its error
// is Config's, for a scenario built in Go with a bad simulation field.
func (s *Scenario) SimConfig() (sim.Config, error) {
	sp := s.Spec(false)
	return sp.SimConfig()
}

// runOnce runs one configuration under s.Timeout: virtual in simulation,
// where only the run's own (virtual) deadline can make it hung and a wall
// limit can only say that the host gave up; real otherwise, where a run
// that has not returned hangGrace after its deadline is hung. The ranks
// are the runner's: when it stops waiting it cancels them and waits for
// them.
func runOnce(ctx context.Context, s *Scenario, withReplay bool, o runOpts) Outcome {
	out := Outcome{Backend: o.backend, Replay: withReplay}
	cfg, err := s.Config(withReplay)
	if err != nil {
		out.Err = err
		return out
	}
	if o.log != nil {
		cfg.Log = o.log
	}
	simulated := o.backend == "sim"
	type ret struct {
		rep     *executor.Report
		err     error
		elapsed time.Duration // virtual, in simulation
	}
	done := make(chan ret, 1)
	finished := make(chan struct{}) // closed once done holds the run's result
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The host's clock bounds how long the runner waits for its ranks; in
	// simulation it decides no verdict (see below).
	host := clock.Real()
	start := host.Now()
	guard := o.wallLimit
	progress := new(sim.Progress)
	if simulated {
		go func() {
			defer close(finished)
			sc, err := s.SimConfig()
			if err != nil {
				done <- ret{nil, err, 0}
				return
			}
			if o.simCfg != nil {
				o.simCfg(&sc)
			}
			sc.Progress = progress
			w := &launch.Sim{Config: sc}
			rep, err := executor.Run(rctx, cfg, w)
			done <- ret{rep, err, w.Result.Elapsed}
		}()
	} else {
		// A real-time run's own deadline (the ranks notice it and return).
		var dcancel context.CancelFunc
		rctx, dcancel = context.WithTimeout(rctx, s.Timeout)
		defer dcancel()
		go func() {
			defer close(finished)
			rep, err := executor.Run(rctx, cfg, launch.Local{Checked: true, Timeout: s.CollectiveTimeout})
			done <- ret{rep: rep, err: err}
		}()
		guard = s.Timeout + hangGrace
	}
	wait := host.NewWaiter()
	defer wait.Stop()
	_ = wait.Wait(context.Background(), finished, start.Add(guard))
	select {
	case r := <-done:
		out.Report, out.Err = r.rep, r.err
		out.Elapsed = clock.Since(host, start)
		if simulated {
			out.Elapsed = r.elapsed
			out.Hung = errorsIsDeadline(r.err) // the run's own (virtual) deadline ended it
		} else if out.Err != nil && rctx.Err() != nil && ctx.Err() == nil {
			// The run's own deadline ended it: that is a hang the
			// ranks noticed, not an outcome.
			out.Hung = true
		}
		return out
	default:
	}
	out.Elapsed = clock.Since(host, start)
	if simulated {
		// Wall time decides nothing in simulation: the host gave up. A
		// run whose scheduler takes no step for a second has a rank that
		// spins without reaching a scheduling point (virtual time cannot
		// move): that is the program's bug, and said so.
		before := progress.Steps()
		_ = wait.Wait(context.Background(), finished, host.Now().Add(time.Second))
		if !closed(finished) && progress.Steps() == before {
			out.Hung = true
			out.Err = fmt.Errorf("scenario %s: a rank spins without reaching a scheduling point: no scheduling step for 1s of wall time after %v, after %d steps (a livelock: virtual time cannot move)",
				s.Label(), guard.Round(time.Millisecond), before)
		} else {
			out.HostGaveUp = true
			out.Err = fmt.Errorf("scenario %s: the host gave up after %v of wall time before the simulated run ended, still stepping (%d steps; not a verdict: only virtual time decides; raise the wall limit or use a faster host)",
				s.Label(), guard.Round(time.Millisecond), progress.Steps())
		}
	} else {
		out.Hung = true
	}
	// Its owner stops it: cancel, and wait for the ranks to return (every
	// wait in the runtime honours its context). Ranks that do not are a
	// second bug, reported.
	cancel()
	_ = wait.Wait(context.Background(), finished, host.Now().Add(hangGrace))
	if !closed(finished) {
		out.Err = fmt.Errorf("scenario %s: the run did not stop within %v of being cancelled: its goroutines are left running", s.Label(), hangGrace)
	}
	return out
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Load parses every file matching pattern (a glob), sorted by name.
func Load(pattern string) ([]Scenario, error) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("scenario: no file matches %s", pattern)
	}
	sort.Strings(files)
	var out []Scenario
	for _, f := range files {
		s, err := ParseFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func errorsIsDeadline(err error) bool { return errors.Is(err, sim.ErrDeadline) }
