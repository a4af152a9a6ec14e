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

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
)

// hangGrace is how long Run waits past a run's deadline for the ranks to
// return before it calls the run hung.
const hangGrace = 10 * time.Second

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
	log     *zap.Logger
	backend string
	simCfg  func(*sim.Config)
}

// WithLogger gives the runs a logger (default: none).
func WithLogger(l *zap.Logger) Option { return func(o *runOpts) { o.log = l } }

// WithBackend runs on an in-process backend: local (the default) or sim.
func WithBackend(b string) Option { return func(o *runOpts) { o.backend = b } }

// WithSim adjusts the simulation a sim run uses (after SimConfig).
func WithSim(f func(*sim.Config)) Option { return func(o *runOpts) { o.simCfg = f } }

func options(opts []Option) runOpts {
	o := runOpts{backend: "local"}
	for _, f := range opts {
		f(&o)
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
		if !off.Hung && len(s.Verdict(off, true)) == 0 {
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
// collective timeout and link model, its deadline, all virtual.
func (s *Scenario) SimConfig() sim.Config {
	f := sim.Fabrics["zero"]
	if s.Hardware != "" {
		f = sim.Fabrics[s.Hardware]
	}
	seed := s.ScheduleSeed
	if seed == 0 {
		seed = s.Seed
	}
	return sim.Config{Seed: seed, Strategy: s.Strategy, Depth: s.PCTDepth, Checked: true, Timeout: s.CollectiveTimeout, Fabric: f, Jitter: s.MsgJitter,
		Deadline: s.Timeout}
}

// runOnce runs one configuration under s.Timeout (virtual in simulation);
// it returns when the run does, or marks it hung hangGrace after the
// deadline in wall time. The ranks are the runner's: on a hang it cancels
// them and waits for them.
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
	rctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	type ret struct {
		rep     *executor.Report
		err     error
		elapsed time.Duration // virtual, in simulation
		sim     bool
	}
	done := make(chan ret, 1)
	start := time.Now()
	go func() {
		if o.backend == "sim" {
			sc := s.SimConfig()
			if o.simCfg != nil {
				o.simCfg(&sc)
			}
			rep, res, err := executor.RunSim(ctx, cfg, sc)
			done <- ret{rep, err, res.Elapsed, true}
			return
		}
		rep, err := executor.RunLocal(rctx, cfg, true, s.CollectiveTimeout)
		done <- ret{rep: rep, err: err}
	}()
	t := time.NewTimer(s.Timeout + hangGrace)
	defer t.Stop()
	select {
	case r := <-done:
		out.Report, out.Err = r.rep, r.err
		out.Elapsed = time.Since(start)
		if r.sim {
			out.Elapsed = r.elapsed
			out.Hung = errorsIsDeadline(r.err) // the run's own (virtual) deadline ended it
		} else if out.Err != nil && rctx.Err() != nil && ctx.Err() == nil {
			// The run's own deadline ended it: that is a hang the
			// ranks noticed, not an outcome.
			out.Hung = true
		}
	case <-t.C:
		out.Elapsed = time.Since(start)
		out.Hung = true
		// The run ignored its deadline. Its owner stops it: cancel, and
		// wait for the ranks to return (every wait in the runtime honours
		// its context). Ranks that do not are a second bug, reported.
		cancel()
		stop := time.NewTimer(hangGrace)
		defer stop.Stop()
		select {
		case <-done:
		case <-stop.C:
			out.Err = fmt.Errorf("scenario %s: the run did not stop within %v of being cancelled: its goroutines are left running", s.Label(), hangGrace)
		}
	}
	return out
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
