package scenario

import (
	"context"
	"fmt"
	"strings"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/executor"
)

// Variant names one of a scenario's runs: as written, or with its replay
// under test on.
func (s *Scenario) Variant(withReplay bool) string {
	if withReplay {
		return "with " + string(s.ReplayUnderTest)
	}
	return "as written"
}

// Expectation returns what the run of a variant must show on backend: its
// expect: (or expect-with-replay:) lines, and in simulation its expect-sim:
// (or expect-sim-with-replay:) bounds as well.
func (s *Scenario) Expectation(withReplay bool, backend string) Expectation {
	e, extra := s.Expect, s.ExpectSim
	if withReplay {
		e, extra = s.ExpectWithReplay, s.ExpectSimWithReplay
	}
	if backend == "sim" {
		return e.with(extra)
	}
	return e
}

// Verdict checks one variant's outcome against its expectation on the
// outcome's backend: the reasons it fails, none when it passes. Every
// backend's runner uses it, so a scenario means the same in-process, in
// simulation and under mpirun.
func (s *Scenario) Verdict(o Outcome, withReplay bool) []string {
	e := s.Expectation(withReplay, o.Backend)
	return e.check(o, s.Requests, s.Timeout)
}

// RunRank runs this rank's part of one variant of s on world (every CTX
// rank, then every GEN rank, s.Ranks() in all), under s.Timeout, and returns
// what this rank saw: on world rank 0 the merged report, on any rank its
// error. The caller makes world checked with s.CollectiveTimeout, as Run
// does in-process; world rank 0's outcome, or the outcome of a rank that
// failed, is the one to judge with Verdict.
func RunRank(ctx context.Context, world comm.Comm, s *Scenario, withReplay bool, opts ...Option) Outcome {
	var o runOpts
	for _, f := range opts {
		f(&o)
	}
	out := Outcome{Backend: "mpi", Replay: withReplay}
	cfg, err := s.Config(withReplay)
	if err != nil {
		out.Err = err
		return out
	}
	if o.log != nil {
		cfg.Log = o.log
	}
	if world.Size() != s.Ranks() {
		out.Err = fmt.Errorf("scenario %s needs %d ranks, the world has %d", s.Label(), s.Ranks(), world.Size())
		return out
	}
	clk := clock.Or(cfg.Clock)
	rctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	start := clk.Now()
	out.Report, _, out.Err = executor.RunRank(rctx, world, cfg)
	out.Elapsed = clock.Since(clk, start)
	if out.Err != nil && rctx.Err() != nil && ctx.Err() == nil {
		out.Hung = true // the run's own deadline ended it
	}
	return out
}

// TimingBounds lists the expectations of a variant that bound a timing
// figure from above (ttft-p99 < 40ms, ...): they hold in-process and in
// simulation, where the control plane's own latency is all there is, but
// not under a real launcher whose wake-ups are the operating system's.
func (s *Scenario) TimingBounds(withReplay bool) []string {
	var out []string
	e := s.Expectation(withReplay, "mpi")
	for _, b := range e.Bounds {
		if figures[b.Figure].ms && (b.Op == "<" || b.Op == "<=" || b.Op == "==") {
			out = append(out, b.text)
		}
	}
	return out
}

// VerdictLine renders a verdict as the one line the scenario command
// prints: "PASS FILE (variant, expect ok): summary" or "FAIL ...: reasons".
func (s *Scenario) VerdictLine(o Outcome, withReplay bool) (string, bool) {
	why := s.Verdict(o, withReplay)
	kind := "ok"
	if e := s.Expectation(withReplay, o.Backend); !e.OK {
		kind = "error"
	}
	head := fmt.Sprintf("%s (%s, expect %s)", s.Label(), s.Variant(withReplay), kind)
	if len(why) > 0 {
		return fmt.Sprintf("FAIL %s: %s (reproduce: %s)", head, strings.Join(why, "; "), s.CommandLineOn(o.Backend, withReplay)), false
	}
	return fmt.Sprintf("PASS %s: %s", head, o.Summary()), true
}
