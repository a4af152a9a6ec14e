package local

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
)

// Config configures a world.
type Config struct {
	// Checked wraps every rank's communicators in checked mode.
	Checked bool
	// Timeout bounds every collective, checked or not
	// (comm.DefaultCollectiveTimeout when 0): a rank that waits longer for
	// its peers gets a *comm.TimeoutError naming the ranks that never
	// arrived, and the group is broken.
	Timeout time.Duration
	// BoundWaits bounds every point-to-point Wait by Timeout too: a wait
	// that no peer matches in time returns a *comm.WaitTimeoutError
	// (launch sets it; the executor bounds its own waits).
	BoundWaits bool
	// Clock times the collective bound (clock.Real() when nil).
	Clock clock.Clock
	// RecorderDepth is the flight-recorder depth (comm default when 0).
	RecorderDepth int
	// AnySite: checked collectives pair across call sites
	// (comm.CheckConfig.AnySite).
	AnySite bool
}

// MaxRanks bounds the size of an in-process world.
const MaxRanks = 4096

// RankFunc runs on one rank.
type RankFunc func(ctx context.Context, c comm.Comm) error

// Run runs fn on n goroutine ranks and returns the first error (in time)
// that any rank returned, wrapped with its rank; the other ranks' contexts
// are cancelled at that moment. A panic in a rank is returned as an error
// with its stack. Run returns only after every rank has returned.
func Run(ctx context.Context, n int, cfg Config, fn RankFunc) error {
	errs, first := run(ctx, n, cfg, fn)
	if first < 0 {
		return errs[0] // nil, or the argument error
	}
	return errs[first]
}

// RunAll is Run returning every rank's error (nil entries for ranks that
// succeeded), for callers that check each rank's outcome.
func RunAll(ctx context.Context, n int, cfg Config, fn RankFunc) []error {
	errs, _ := run(ctx, n, cfg, fn)
	return errs
}

func run(ctx context.Context, n int, cfg Config, fn RankFunc) ([]error, int) {
	if n <= 0 || n > MaxRanks {
		return []error{fmt.Errorf("%w: local.Run: ranks %d outside 1..%d", comm.ErrBadArgument, n, MaxRanks)}, -1
	}
	if fn == nil {
		return []error{fmt.Errorf("%w: local.Run: nil rank function", comm.ErrBadArgument)}, -1
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := newWorld(n, cfg, cancel)
	errs := make([]error, n)
	var (
		mu    sync.Mutex
		first = -1
		wg    sync.WaitGroup
	)
	for r := range n {
		wg.Go(func() {
			err := runRank(ctx, w.rankComm(r), fn)
			// A failure is recorded (and the others cancelled) before the
			// ranks waiting on this one are told it returned: its own error
			// comes first, not theirs.
			defer w.rankReturned(r)
			if err == nil {
				return
			}
			err = fmt.Errorf("rank %d: %w", r, err)
			mu.Lock()
			errs[r] = err
			if first < 0 {
				first = r
				cancel(err)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs, first
}

func runRank(ctx context.Context, c comm.Comm, fn RankFunc) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(ctx, c)
}

type world struct {
	n         int
	cfg       Config
	recorders []*flight.Recorder
	notify    []chan struct{} // per world rank, see comm.PropsOf(c).Notify
	// returned is set, per world rank, once its rank function has
	// returned: the stall inspector says so of a rank its peers wait for.
	returned []atomic.Bool
	cancel   context.CancelCauseFunc

	mu     sync.Mutex
	groups map[string]*group
	root   *group
}

func newWorld(n int, cfg Config, cancel context.CancelCauseFunc) *world {
	if cfg.Timeout <= 0 {
		cfg.Timeout = comm.DefaultCollectiveTimeout
	}
	cfg.Clock = clock.Or(cfg.Clock)
	w := &world{n: n, cfg: cfg, cancel: cancel, groups: map[string]*group{}, notify: make([]chan struct{}, n), returned: make([]atomic.Bool, n)}
	for r := range w.notify {
		w.notify[r] = make(chan struct{}, 1)
	}
	if cfg.Checked {
		w.recorders = make([]*flight.Recorder, n)
		for r := range n {
			w.recorders[r] = flight.NewRecorder(cfg.RecorderDepth)
		}
	}
	members := make([]int, n)
	for r := range members {
		members[r] = r
	}
	w.root = newGroup(w, "world", members)
	w.groups["world"] = w.root
	return w
}

func (w *world) rankComm(r int) comm.Comm {
	rc := newRankComm(w, w.root, r)
	if w.cfg.Checked {
		return comm.NewChecked(rc, comm.CheckConfig{Timeout: w.cfg.Timeout, Recorder: w.recorders[r], AnySite: w.cfg.AnySite})
	}
	return rc
}

// rankReturned notes that world rank r's function returned and wakes the
// ranks waiting in a round of any group r belongs to: r enters nothing
// more, and they fail at once naming it (group.leftByReturnedLocked)
// instead of waiting out the collective bound.
func (w *world) rankReturned(r int) {
	w.returned[r].Store(true)
	w.mu.Lock()
	var of []*group
	for _, g := range w.groups {
		if slices.Contains(g.members, r) {
			of = append(of, g)
		}
	}
	w.mu.Unlock()
	for _, g := range of {
		g.wakeWaiting()
	}
}

// groupFor returns the shared group object named name, creating it with
// members on first use. Every member computes the same name and members.
func (w *world) groupFor(name string, members []int) (*group, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g, ok := w.groups[name]; ok {
		if len(g.members) != len(members) {
			return nil, fmt.Errorf("%w: group %q exists with %d members, rank asked for %d", comm.ErrDesync, name, len(g.members), len(members))
		}
		return g, nil
	}
	g := newGroup(w, name, members)
	w.groups[name] = g
	return g, nil
}

// abort cancels the whole world: every rank's context ends with reason.
func (w *world) abort(reason error) {
	if reason == nil {
		reason = errors.New("local: aborted")
	}
	w.cancel(reason)
}
