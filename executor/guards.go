package executor

import (
	"fmt"
	"strings"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
)

// The executor's decision points record the rank-local values that decide
// its next collective (DESIGN.md §12): admission records how many waiting
// requests fit this rank's pool and its free blocks, the progress policy
// the local facts it reads (sessions held, work of its own, new failures),
// the outcome exchange how many reports this rank brings, intake how many
// records a leader has to broadcast. A desync or timeout that follows then
// names, on each side, the value that sent the rank its way; the decisions
// themselves (the policy row each iteration took) are kept in a short log
// for the failure dump.

// decisionDepth is how many decisions a rank keeps for its dump.
const decisionDepth = 32

// decision is one decision a rank took, as the dump shows it.
type decision struct {
	iter  int
	at    int64  // ns since the run's start
	what  string // "admission", "progress", "outcomes"
	row   string // the policy row (a constant: no allocation)
	a, b  int64  // the decision's rank-local inputs, named by keys
	keys  [2]string
	bools [2]bool // which inputs are truth values
}

// decisions is a ring of a rank's last decisions.
type decisions struct {
	ring [decisionDepth]decision
	n    int
}

func (d *decisions) add(x decision) {
	d.ring[d.n%decisionDepth] = x
	d.n++
}

// last returns the decisions kept, oldest first.
func (d *decisions) last() []decision {
	k := min(d.n, decisionDepth)
	out := make([]decision, 0, k)
	for i := d.n - k; i < d.n; i++ {
		out = append(out, d.ring[i%decisionDepth])
	}
	return out
}

// lastOf returns the latest decision of kind what.
func (d *decisions) lastOf(what string) (decision, bool) {
	for i := d.n - 1; i >= max(0, d.n-decisionDepth); i-- {
		if x := d.ring[i%decisionDepth]; x.what == what {
			return x, true
		}
	}
	return decision{}, false
}

// inputs renders the decision's inputs: "fits=0, free_blocks=8".
func (x decision) inputs() string {
	var parts []string
	vals := [2]int64{x.a, x.b}
	for i, k := range x.keys {
		switch {
		case k == "":
		case x.bools[i]:
			parts = append(parts, fmt.Sprintf("%s=%t", k, vals[i] != 0))
		default:
			parts = append(parts, fmt.Sprintf("%s=%d", k, vals[i]))
		}
	}
	return strings.Join(parts, ", ")
}

func (x decision) String() string {
	s := fmt.Sprintf("iteration %d: %s: %s", x.iter, x.what, x.row)
	if in := x.inputs(); in != "" {
		s += " (" + in + ")"
	}
	return s
}

// guardAdmission records admission's rank-local inputs.
//
//go:noinline
func (l *loop) guardAdmission(waiting int, a AdmissionAction, free int) {
	l.rec.GuardsCaller(flight.Value{Name: "waiting", V: int64(waiting)}, flight.Value{Name: "fits", V: int64(a.LocalFit)}, flight.Value{Name: "free_blocks", V: int64(free)})
	row := "no collective (nothing waits, or one rank)"
	switch {
	case a.ReapFirst:
		row = "replay local-admission-gate: nothing fits here, reap first"
	case a.Agree:
		row = "agree on the minimum fit"
	case l.g.exec.Size() > 1 && a.LocalFit > 0:
		row = "replay local-admission-gate: admit the local fit"
	}
	l.decided(decision{what: "admission", row: row, a: int64(waiting), b: int64(a.LocalFit), keys: [2]string{"waiting", "fits"}})
}

// guardProgress records the progress policy's rank-local inputs and the row
// it took.
//
//go:noinline
func (l *loop) guardProgress(in ProgressInput, a ProgressAction) {
	x := decision{what: "progress", row: a.Row}
	switch {
	case l.isCtx():
		x.a, x.keys[0], x.bools[0] = b2i(in.SendsHeld), "sends_held", true
	case in.Replays.On(UnsafeIdleReap):
		x.a, x.keys[0], x.bools[0] = b2i(in.ScopeHolds), "scope_holds", true
		x.b, x.keys[1], x.bools[1] = b2i(in.BusyLocally), "busy_locally", true
	case in.Replays.On(LocalErrorCollective):
		x.a, x.keys[0], x.bools[0] = b2i(in.ScopeHolds), "scope_holds", true
		x.b, x.keys[1] = int64(in.NewLocalFailures), "new_local_failures"
	default:
		x.a, x.keys[0], x.bools[0] = b2i(in.ScopeHolds), "scope_holds", true
	}
	if x.keys[1] == "" {
		l.rec.GuardsCaller(flight.Value{Name: x.keys[0], V: x.a, Bool: true})
	} else {
		l.rec.GuardsCaller(flight.Value{Name: x.keys[0], V: x.a, Bool: true}, flight.Value{Name: x.keys[1], V: x.b, Bool: x.bools[1]})
	}
	l.decided(x)
}

func (l *loop) decided(x decision) {
	x.iter = l.rep.Iterations
	if l.cfg.DumpDir != "" {
		x.at = l.now() // only a dump shows it: no clock read otherwise
	}
	l.log1.add(x)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// lastDecisionText is ", after its last progress decision: <row> (<inputs>)"
// for an error that ends the loop, "" when none was taken.
func (l *loop) lastDecisionText(what string) string {
	x, ok := l.log1.lastOf(what)
	if !ok {
		return ""
	}
	s := fmt.Sprintf("; its last %s decision (iteration %d): %s", what, x.iter, x.row)
	if in := x.inputs(); in != "" {
		s += " after " + in
	}
	return s
}

// recorderOf resolves a rank's flight recorder once (nil when unchecked:
// recording is then a no-op).
func recorderOf(g groups, world comm.Comm) *flight.Recorder {
	for _, c := range []comm.Comm{g.exec, g.inst, world} {
		if c != nil {
			if r := comm.PropsOf(c).Recorder; r != nil {
				return r
			}
		}
	}
	return nil
}
