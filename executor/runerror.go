package executor

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/topology"
)

// ErrInterrupted is the cause of a run cancelled on purpose (a signal, in
// the CLI): its report is partial and says so.
var ErrInterrupted = errors.New("executor: interrupted")

// RunError is why a run ended early, in its report: a kind a script can
// switch on, the message, and the world ranks that failed or that the
// failure names (a collective's missing ranks).
type RunError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Ranks   []int  `json:"ranks"`
	// WaitedOn: world ranks that the ranks missing from a timed-out
	// collective were waiting on in point-to-point operations
	// (comm.TimeoutError.WaitsOn): where to look next.
	WaitedOn []int `json:"waited_on,omitempty"`
}

// Error kinds, most specific first.
var errorKinds = []struct {
	err  error
	kind string
}{
	{ErrInterrupted, "interrupted"},
	{comm.ErrDesync, "desync"},
	{comm.ErrCollectiveTimeout, "collective-timeout"},
	{ErrStalled, "stalled"},
	{ErrInjected, "injected"},
	{errKinded, ""}, // a backend's own kind: the simulator's "deadlock"
	{ErrConfig, "config"},
	{context.DeadlineExceeded, "timeout"},
	{context.Canceled, "cancelled"},
}

// ErrorKind names the kind of a run error ("error" when none fits).
func ErrorKind(err error) string {
	for _, k := range errorKinds {
		if k.err == errKinded {
			if kind := backendKind(err); kind != "" {
				return kind
			}
			continue
		}
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return "error"
}

// errKinded marks the place in errorKinds of the kinds backends name
// themselves: an error in err's chain with an ErrorKind method (the
// simulator's *sim.DeadlockError says "deadlock"), so that executor
// imports no backend to name their errors.
var errKinded = errors.New("executor: a backend's error kind")

func backendKind(err error) string {
	var k interface{ ErrorKind() string }
	if errors.As(err, &k) {
		return k.ErrorKind()
	}
	return ""
}

// NewRunError describes err; failed lists the world ranks whose own
// error it is (not those cancelled because of it). The missing ranks of a
// collective timeout are named too, and apart, the ranks they wait on
// (TimeoutError.WaitsOn).
func NewRunError(err error, failed []int) *RunError {
	ranks := slices.Clone(failed)
	var te *comm.TimeoutError
	if errors.As(err, &te) {
		for _, m := range te.Missing {
			if m >= 0 && m < len(te.WorldRanks) {
				m = te.WorldRanks[m]
			} else if te.WorldRanks == nil && te.Group != "world" {
				continue // a group rank with no known world rank
			}
			ranks = append(ranks, m)
		}
	}
	slices.Sort(ranks)
	ranks = slices.Compact(ranks)
	if ranks == nil {
		ranks = []int{}
	}
	re := &RunError{Kind: ErrorKind(err), Message: err.Error(), Ranks: ranks}
	if te != nil {
		re.WaitedOn = te.WaitsOn()
	}
	return re
}

// rankOutcomes collects what each rank of an in-process run measured and
// how it ended, so a run that fails still has a (partial) report.
type rankOutcomes struct {
	reps   []RankReport
	failed []bool // ended on an error of its own
	ended  []bool
}

func newRankOutcomes(n int) *rankOutcomes {
	return &rankOutcomes{reps: make([]RankReport, n), failed: make([]bool, n), ended: make([]bool, n)}
}

// keep records world rank r's report and whether it ended on an error of
// its own: one it met before its run was cancelled (ctx: the rank's
// context; an in-process world cancels the others at the first error, so
// theirs are consequences). Each rank writes only its own entries, and
// they are read after every rank has returned.
func (o *rankOutcomes) keep(ctx context.Context, r int, rep RankReport, err error) {
	o.reps[r], o.ended[r] = rep, true
	o.failed[r] = err != nil && ctx.Err() == nil && !errors.Is(err, ErrInterrupted) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// partial builds the report of a failed run from what every rank
// measured, with the error that ended it.
func (o *rankOutcomes) partial(cfg *Config, err error, elapsed float64) *Report {
	var reps []RankReport
	var failed []int
	for r, ok := range o.ended {
		if !ok {
			continue
		}
		rr := o.reps[r]
		if rr.Role == "" {
			// The rank failed before it measured anything.
			role, rank := topology.RoleOf(cfg.Ctx, cfg.Gen, r)
			rr.WorldRank, rr.Role, rr.Rank = r, role.String(), rank
		}
		reps = append(reps, rr)
		if o.failed[r] {
			failed = append(failed, r)
		}
	}
	rep := buildReport(cfg, reps, 0)
	rep.DurationS = elapsed
	rep.Error = NewRunError(err, failed)
	rep.Errors = append(rep.Errors, err.Error())
	rep.cutShort(cfg.Workload.Requests)
	return rep
}

// RankEnd is how one rank of a failed run ended: what it measured up to
// then, and its error. An error that only follows from another rank's
// (ErrInterrupted, a cancellation, a deadline) does not make the rank one
// of those that failed.
type RankEnd struct {
	WorldRank int
	Report    RankReport
	Err       error
}

// Partial is the report of a run that failed on err, merged from what the
// ranks in ends measured (a rank absent from ends, or out of range, adds
// nothing): under mpirun a failing rank cannot wait for its peers'
// reports, and world rank 0 builds the report from those that came.
func Partial(cfg Config, ends []RankEnd, err error, elapsed time.Duration) *Report {
	cfg.Defaults()
	out := newRankOutcomes(cfg.Ranks())
	for _, e := range ends {
		if e.WorldRank >= 0 && e.WorldRank < cfg.Ranks() {
			out.keep(context.Background(), e.WorldRank, e.Report, e.Err)
		}
	}
	return out.partial(&cfg, err, elapsed.Seconds())
}
