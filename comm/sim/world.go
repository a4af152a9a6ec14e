package sim

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
)

// Sentinel errors.
var (
	// ErrDeadlock: every rank waits for something that cannot happen. See
	// *DeadlockError.
	ErrDeadlock = errors.New("sim: deadlock")
	// ErrDeadline: the run reached Config.Deadline (virtual time).
	ErrDeadline = errors.New("sim: run deadline")
)

// MaxRanks bounds the size of a simulated world.
const MaxRanks = 1 << 16

// DefaultStart is the virtual time a run starts at.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Config configures a simulated world.
type Config struct {
	// Seed is the only source of nondeterminism: the same seed and
	// configuration give the same run.
	Seed     uint64
	Strategy Strategy
	// Depth is PCT's bug depth d (d-1 priority change points; 3 when 0).
	Depth int
	// Checked wraps every rank's communicators in checked mode.
	Checked bool
	// AnySite: checked collectives pair across call sites
	// (comm.CheckConfig.AnySite).
	AnySite bool
	// Timeout bounds every collective in virtual time
	// (comm.DefaultCollectiveTimeout when 0).
	Timeout time.Duration
	// Fabric is the link model (the zero Fabric: no cost).
	Fabric Fabric
	// PayloadScale makes every point-to-point message whose tag is at
	// least PayloadTagsFrom count this many times its length on the links
	// (0 or 1: as is). A run that carries a sample of each KV head's
	// elements (rankrun --kv-sample N moves HeadDim/N of them) charges the
	// links for the full bytes of its KV fragments (tags from
	// transceiver.DataTagLow), and its control messages for what they are:
	// With PayloadHeader, the virtual times are those of the run that
	// carries every byte, to the nanosecond.
	PayloadScale int
	// PayloadTagsFrom is the least tag that PayloadScale applies to (0:
	// every message).
	PayloadTagsFrom int
	// PayloadHeader is how many leading bytes of a scaled message are
	// charged once, not PayloadScale times: a KV fragment's header
	// (transceiver.HeaderSize).
	PayloadHeader int
	// Jitter adds a seeded delay in [0, Jitter) to every message (messages
	// between one pair on one communicator still arrive in order).
	Jitter time.Duration
	// EarlyArrivals lets what a rank observes locally differ between
	// schedules, as ranks' speeds make it differ on a real machine: a
	// message in flight may arrive at any point between its send and its
	// receiver's blocking wait. Each Test of a receive that a message in
	// flight would match is a choice of the schedule (seeded): the
	// message has arrived by then, or not yet. Messages of one pair still
	// arrive in order (MPI's non-overtaking rule), and a Wait still waits
	// for the link model's arrival. For the schedule search: a run's
	// timing then no longer follows the link model alone, so the default
	// (off) keeps every figure.
	EarlyArrivals bool
	// Start is the virtual time of the start (DefaultStart when zero).
	Start time.Time
	// Deadline ends the run at this much virtual time: every rank's
	// context ends with ErrDeadline (0: none).
	Deadline time.Duration
	// NoDeadlockDetection turns off the deadlock detector, which reports a
	// deadlock (ErrDeadlock) as soon as every rank waits and only
	// deadlines that end waits in failure remain (collective timeouts, the
	// run's deadline), instead of at the first of them.
	NoDeadlockDetection bool
	RecorderDepth       int
	// Progress, when set, counts the run's scheduling steps as they are
	// taken, for a caller watching from another goroutine (a runner that
	// gives up on the host tells a slow run from one where a rank spins
	// without ever reaching a scheduling point).
	Progress *Progress
}

// Progress is a run's step count, readable while it runs.
type Progress struct{ steps atomic.Uint64 }

// Steps is how many scheduling decisions the run has taken so far.
func (p *Progress) Steps() uint64 { return p.steps.Load() }

func (c *Config) fill() error {
	if c.Start.IsZero() {
		c.Start = DefaultStart
	}
	if c.Timeout == 0 {
		c.Timeout = comm.DefaultCollectiveTimeout
	}
	if c.Depth <= 0 {
		c.Depth = 3
	}
	if c.PayloadTagsFrom < 0 || c.PayloadHeader < 0 {
		return fmt.Errorf("%w: sim: payload tags from %d and header %d must not be negative", comm.ErrBadArgument, c.PayloadTagsFrom, c.PayloadHeader)
	}
	if c.PayloadScale < 0 {
		return fmt.Errorf("%w: sim: payload scale %d must not be negative", comm.ErrBadArgument, c.PayloadScale)
	}
	if c.Jitter < 0 || c.Deadline < 0 || c.Timeout < 0 {
		return fmt.Errorf("%w: sim: jitter %v, deadline %v and timeout %v must not be negative", comm.ErrBadArgument, c.Jitter, c.Deadline, c.Timeout)
	}
	return c.Fabric.Validate()
}

// RankFunc runs on one simulated rank. It must block only through c, clk
// and the waiters clk makes (and never start goroutines that use them).
type RankFunc func(ctx context.Context, c comm.Comm, clk clock.Clock) error

// Result is what a simulated run did.
type Result struct {
	Errs  []error // by world rank (nil: the rank succeeded)
	First int     // the rank whose error came first (-1: none)
	// Elapsed is the run's virtual duration.
	Elapsed time.Duration
	Steps   int // scheduling decisions taken
	// Schedule fingerprints the choices the scheduler made (a hash of
	// every pick among two or more ready ranks): equal for equal runs.
	Schedule uint64
	Deadlock *DeadlockError // set when the run deadlocked
	// Unfinished lists, by world rank, the point-to-point requests each
	// rank's function left behind when it returned: receives never
	// completed, and requests whose end the rank never saw (no Test that
	// reported it done, no Wait, no Cancel that withdrew it).
	Unfinished []Unfinished
}

// Unfinished is one request a rank left behind.
type Unfinished struct {
	Rank int    // world rank
	What string // "receive from 1 tag 5 on world, never completed"
}

func (u Unfinished) String() string { return fmt.Sprintf("rank %d: %s", u.Rank, u.What) }

// Err is the first rank's error, wrapped with its rank (nil on success).
func (r Result) Err() error {
	if r.First < 0 {
		return nil
	}
	return r.Errs[r.First]
}

// world is the shared state of one simulated run. It is touched only by
// the rank (or the driver) holding the baton, so it needs no lock: the
// coroutine switches that pass the baton order every access.
type world struct {
	cfg    Config
	n      int
	now    time.Time
	ranks  []*rankState
	events eventHeap
	// progressPending counts the events in the heap that move the run
	// forward (the deadlock detector's question).
	progressPending int
	seq             uint64
	steps           int
	schedule        uint64
	strat           picker
	rng             *rand.Rand // message jitter
	readyList       []int      // ready ranks, in the order they became ready
	live            int        // ranks not done
	baton           *rankState // the rank the driver resumes next (nil: none is left)
	cancel          context.CancelCauseFunc
	cancelled       bool
	deadlock        *DeadlockError
	groups          map[string]*group
	notify          []chan struct{}
	outstanding     [][]*request // by world rank: requests whose end its owner has not seen
	unfinished      []Unfinished
	recorders       []*flight.Recorder
	errs            []error
	first           int
	lastArr         map[pairKey]time.Time // per-pair arrival order of messages
	// With EarlyArrivals: the messages in flight on each pair, in arrival
	// order, with their arrival events, and the coin that decides whether
	// one has arrived by a Test.
	inflight map[pairKey][]airborne
	arrRng   *rand.Rand
	// scheduled counts, per pair, the messages whose arrival event is
	// pending (with Jitter, without EarlyArrivals, whose inflight does the
	// same): a message due at the current instant arrives inline only
	// when none of its pair is still pending.
	scheduled map[pairKey]int

	interrupted atomic.Bool
	parent      context.Context
}

// Run runs fn on n simulated ranks, one at a time, and returns once every
// rank returned. The first rank to fail cancels the others, as in comm/local.
// A panic in a rank is returned as its error, with the stack.
func Run(ctx context.Context, n int, cfg Config, fn RankFunc) Result {
	res := Result{First: -1}
	if n <= 0 || n > MaxRanks {
		res.Errs, res.First = []error{fmt.Errorf("%w: sim.Run: ranks %d outside 1..%d", comm.ErrBadArgument, n, MaxRanks)}, 0
		return res
	}
	if err := cfg.fill(); err != nil {
		res.Errs, res.First = []error{err}, 0
		return res
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := newWorld(n, cfg, cancel, ctx)
	stop := context.AfterFunc(ctx, func() { w.interrupted.Store(true) })
	defer stop()
	if cfg.Deadline > 0 {
		w.at(cfg.Start.Add(cfg.Deadline), false, func() {
			w.cancelWorld(fmt.Errorf("%w: %v of virtual time", ErrDeadline, cfg.Deadline))
		})
	}
	for r := range n {
		rs := w.ranks[r]
		rs.run, _ = iter.Pull(func(yield func(struct{}) bool) {
			rs.yield = yield
			w.runRank(rctx, r, fn)
		})
	}
	w.drive()
	res.Errs, res.First = w.errs, w.first
	res.Elapsed, res.Steps, res.Deadlock, res.Schedule = w.now.Sub(cfg.Start), w.steps, w.deadlock, w.schedule
	res.Unfinished = w.unfinished
	return res
}

func newWorld(n int, cfg Config, cancel context.CancelCauseFunc, parent context.Context) *world {
	w := &world{cfg: cfg, n: n, now: cfg.Start, cancel: cancel, parent: parent,
		groups: map[string]*group{}, notify: make([]chan struct{}, n), errs: make([]error, n), first: -1,
		outstanding: make([][]*request, n),
		lastArr:     map[pairKey]time.Time{}}
	base := rand.New(rand.NewPCG(cfg.Seed, 0x73696d))
	w.rng = rand.New(rand.NewPCG(base.Uint64(), base.Uint64()))
	switch cfg.Strategy {
	case PCT:
		w.strat = newPCT(rand.New(rand.NewPCG(base.Uint64(), base.Uint64())), n, cfg.Depth, 1000*n)
	default:
		w.strat = &randomWalk{rng: rand.New(rand.NewPCG(base.Uint64(), base.Uint64()))}
	}
	if cfg.EarlyArrivals { // drawn last: the other streams stay as they were
		w.arrRng = rand.New(rand.NewPCG(base.Uint64(), base.Uint64()))
		w.inflight = map[pairKey][]airborne{}
	} else if cfg.Jitter > 0 {
		w.scheduled = map[pairKey]int{}
	}
	w.ranks = make([]*rankState, n)
	w.live = n
	for r := range n {
		w.ranks[r] = &rankState{id: r, state: blocked, idx: -1}
		w.setState(w.ranks[r], ready)
		w.notify[r] = make(chan struct{}, 1)
	}
	if cfg.Checked {
		w.recorders = make([]*flight.Recorder, n)
		for r := range n {
			w.recorders[r] = flight.NewRecorderOn(cfg.RecorderDepth, &rankClock{w: w, r: w.ranks[r]})
		}
	}
	members := make([]int, n)
	for r := range members {
		members[r] = r
	}
	w.groups["world"] = newGroup(w, "world", members)
	return w
}

// runRank is rank r's coroutine: it runs fn, records its outcome and
// passes the baton on.
func (w *world) runRank(ctx context.Context, r int, fn RankFunc) {
	rs := w.ranks[r]
	err := w.call(ctx, r, fn)
	w.setState(rs, done)
	rs.doneAt, rs.doneErr = w.now, err
	for _, q := range w.outstanding[r] {
		state := "not complete when the rank returned"
		if q.done {
			state = "completed, but the rank never saw it end (no Test reported it, no Wait)"
		}
		w.unfinished = append(w.unfinished, Unfinished{Rank: r, What: q.what() + " on " + q.g.name + ", " + state})
	}
	if err != nil {
		err = fmt.Errorf("rank %d: %w", r, err)
		w.errs[r] = err
		if w.first < 0 {
			w.first = r
			w.cancelWorld(err)
		}
	}
	w.baton = w.pick()
}

func (w *world) call(ctx context.Context, r int, fn RankFunc) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	c := w.rankComm(w.groups["world"], r)
	return fn(ctx, c, &rankClock{w: w, r: w.ranks[r]})
}

func (w *world) interruptCause() error {
	if err := context.Cause(w.parent); err != nil {
		return err
	}
	return errors.New("sim: interrupted")
}

// rankComm is rank r's communicator on g (checked when the world is).
func (w *world) rankComm(g *group, r int) comm.Comm {
	rc := &rankComm{w: w, g: g, rank: r}
	if w.cfg.Checked {
		return comm.NewChecked(rc, comm.CheckConfig{Timeout: w.cfg.Timeout, Recorder: w.recorders[g.members[r]], AnySite: w.cfg.AnySite})
	}
	return rc
}
