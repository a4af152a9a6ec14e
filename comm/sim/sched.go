package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm/flight"
)

// A rank's run state.
type runState uint8

const (
	ready   runState = iota // runnable, waiting for the baton
	running                 // holds the baton
	blocked                 // parked until woken
	done                    // its function returned
)

// rankState is the scheduler's view of one rank. Exactly one rank (or the
// driver, between two ranks) holds the baton at a time; a rank gives it up
// only inside a simulation primitive (park, yield, return).
//
// Each rank runs as a coroutine (iter.Pull) of the goroutine that called
// Run, which drives: it resumes the rank that the last one chose, and the
// rank runs until it gives the baton up. A coroutine switch costs a
// fraction of a hand-off between goroutines over a channel, and no other
// thread is ever woken: the whole simulation runs on one.
type rankState struct {
	id    int
	run   func() (struct{}, bool) // resumes the rank's coroutine
	yield func(struct{}) bool     // inside it: back to the driver
	state runState
	idx   int // position in the world's ready list (-1: not there)
	// What the rank is parked on, for the deadlock report and for the
	// wakers: a request it waits for, its completion events, a deadline.
	what     waitOn
	onReq    *request
	onNotify bool
	timer    *event
	since    time.Time
	// When its function returned (state done), and with what.
	doneAt  time.Time
	doneErr error
}

// event is something that happens at a virtual time: a deadline, a message
// delivery, a collective's completion. Ties run in the order they were
// scheduled.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
	// progress: the event moves the run forward (a delivery, a completion,
	// a sleep's end); a deadline that only ends a wait in failure is not
	// progress, for the deadlock detector.
	progress bool
	idx      int
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].idx = i; h[j].idx = j }
func (h *eventHeap) Push(x any)   { e := x.(*event); e.idx = len(*h); *h = append(*h, e) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}
func (h eventHeap) peek() *event { return h[0] }
func (w *world) pending() int    { return w.events.Len() }
func (w *world) push(e *event) {
	heap.Push(&w.events, e)
	if e.progress {
		w.progressPending++
	}
}

func (w *world) popEvent() *event {
	e := heap.Pop(&w.events).(*event)
	if e.progress {
		w.progressPending--
	}
	return e
}

// cancelEvent takes e out of the heap (a deadline whose wait ended).
func (w *world) cancelEvent(e *event) {
	if e.idx < 0 {
		return
	}
	heap.Remove(&w.events, e.idx)
	if e.progress {
		w.progressPending--
	}
}
func (w *world) nextSeq() uint64         { w.seq++; return w.seq }
func (w *world) rankOf(r int) *rankState { return w.ranks[r] }

// at schedules fn at virtual time t.
func (w *world) at(t time.Time, progress bool, fn func()) *event {
	if t.Before(w.now) {
		t = w.now
	}
	e := &event{at: t, seq: w.nextSeq(), fn: fn, progress: progress}
	w.push(e)
	return e
}

// waitOn is what a parked rank waits on, said only when a report needs it
// (a park is a scheduling point: it formats nothing).
type waitOn struct {
	text string      // a fixed description, or
	kind flight.Kind // collective #seq on group g, or
	seq  uint64
	g    *group
	req  *request // a wait for a point-to-point request
}

func (o waitOn) String() string {
	switch {
	case o.req != nil:
		return "a wait for " + o.req.what() + " on " + o.req.g.name
	case o.g != nil:
		return fmt.Sprintf("%s #%d on %s", o.kind, o.seq, o.g.name)
	}
	return o.text
}

// park blocks the running rank r until a waker makes it ready (wake), its
// deadline passes (zero: none), or the world is cancelled. The caller then
// re-checks whatever it waits for: a wake-up is a hint, not a promise.
func (w *world) park(r *rankState, what waitOn, deadline time.Time, progressDeadline bool) {
	w.setState(r, blocked)
	r.what, r.since = what, w.now
	if !deadline.IsZero() {
		r.timer = w.at(deadline, progressDeadline, func() { w.wake(r) })
	}
	w.switchFrom(r)
}

// yield gives the scheduler a choice: the running rank stays ready.
func (w *world) yield(r *rankState) {
	w.setState(r, ready)
	w.switchFrom(r)
}

// setState moves r to st, keeping the ready list (the ranks the strategy
// chooses from, in the order they became ready) and the count of live
// ranks: a scheduling decision costs the ready ranks, not the world.
func (w *world) setState(r *rankState, st runState) {
	if r.state == st {
		return
	}
	if st == ready {
		r.idx = len(w.readyList)
		w.readyList = append(w.readyList, r.id)
	} else if r.state == ready {
		last := w.readyList[len(w.readyList)-1]
		w.readyList[r.idx] = last
		w.ranks[last].idx = r.idx
		w.readyList = w.readyList[:len(w.readyList)-1]
		r.idx = -1
	}
	if st == done {
		w.live--
	}
	r.state = st
}

// wake makes a parked rank ready (a no-op for a rank that is not parked).
func (w *world) wake(r *rankState) {
	if r.state != blocked {
		return
	}
	w.setState(r, ready)
	r.what, r.onReq, r.onNotify = waitOn{}, nil, false
	if r.timer != nil {
		w.cancelEvent(r.timer)
		r.timer = nil
	}
}

// wakeAll makes every parked rank ready (the world was cancelled).
func (w *world) wakeAll() {
	for _, r := range w.ranks {
		w.wake(r)
	}
}

// switchFrom hands the baton from r to the rank the strategy picks (r
// itself, if it is ready and picked) and returns when r gets it back. The
// rank that gives the baton is the one that chooses its successor; the
// driver only resumes it.
func (w *world) switchFrom(r *rankState) {
	next := w.pick()
	if next == r {
		w.setState(r, running)
		return
	}
	w.baton = next
	if !r.yield(struct{}{}) {
		panic("sim: a rank's coroutine was stopped while it waited for the baton")
	}
}

// drive runs ranks until every rank is done: first the one the strategy
// picks, then whichever the rank giving up the baton chose.
func (w *world) drive() {
	for w.baton = w.pick(); w.baton != nil; {
		r := w.baton
		w.setState(r, running)
		r.run()
	}
}

// pick chooses the next rank to run: one of the ready ranks, by the
// strategy; when none is ready, virtual time jumps to the next event; when
// there is none either, every rank waits for something that cannot happen:
// a deadlock, reported, and the world is cancelled so that every rank
// returns. It returns nil when every rank is done.
func (w *world) pick() *rankState {
	for {
		if w.interrupted.Load() && !w.cancelled {
			w.cancelWorld(w.interruptCause())
		}
		if w.live == 0 {
			return nil
		}
		if len(w.readyList) > 0 {
			w.steps++
			if w.cfg.Progress != nil {
				w.cfg.Progress.steps.Add(1)
			}
			r := w.strat.pick(w.readyList, w.steps)
			if len(w.readyList) > 1 { // a choice: part of the schedule
				w.schedule = (w.schedule ^ uint64(r+1)) * 1099511628211
			}
			return w.ranks[r]
		}
		if !w.advance() {
			w.deadlocked()
		}
	}
}

// advance runs the next live event (moving virtual time to it) and reports
// whether there was one. Before it jumps past the last progress event to a
// failure deadline, it checks for a deadlock: if every live rank is parked
// and only failure deadlines remain, nothing can ever make progress.
func (w *world) advance() bool {
	if w.pending() == 0 {
		return false
	}
	if e := w.events.peek(); !e.progress && w.progressPending == 0 && !w.cfg.NoDeadlockDetection && !w.cancelled {
		// Only deadlines that end waits in failure are left: report the
		// deadlock now, not at the first timeout.
		return false
	}
	e := w.popEvent()
	if e.at.After(w.now) {
		w.now = e.at
	}
	e.fn()
	return true
}

// deadlocked records that every rank is parked with nothing pending that
// could wake one, and cancels the world so that every rank returns.
func (w *world) deadlocked() {
	if w.cancelled {
		// Already cancelled and still stuck: a rank ignores its context.
		panic(fmt.Sprintf("sim: ranks do not return after the world was cancelled: %s", w.parkedList()))
	}
	de := &DeadlockError{At: w.now.Sub(w.cfg.Start)}
	for _, r := range w.ranks {
		switch r.state {
		case blocked:
			de.Ranks = append(de.Ranks, RankWait{Rank: r.id, What: r.what.String(), Op: w.userOp(r.id), Since: r.since.Sub(w.cfg.Start)})
		case done:
			de.Returned = append(de.Returned, RankReturn{Rank: r.id, At: r.doneAt.Sub(w.cfg.Start), Err: r.doneErr, Last: w.lastOp(r.id)})
		}
	}
	w.deadlock = de
	w.cancelWorld(de)
}

func (w *world) parkedList() string {
	var parts []string
	for _, r := range w.ranks {
		if r.state == blocked {
			parts = append(parts, fmt.Sprintf("rank %d in %s", r.id, r.what.String()))
		}
	}
	return strings.Join(parts, "; ")
}

// cancelWorld ends every rank's context with cause and wakes every parked
// rank, so that each sees it.
func (w *world) cancelWorld(cause error) {
	if w.cancelled {
		return
	}
	w.cancelled = true
	w.cancel(cause)
	w.wakeAll()
}

// Strategy chooses which ready rank runs next at every scheduling point.
type Strategy uint8

const (
	// RandomWalk picks uniformly among the ready ranks (seeded).
	RandomWalk Strategy = iota
	// PCT gives every rank a random priority and runs the highest ready
	// one, lowering the running rank's priority at Depth-1 random change
	// points (probabilistic concurrency testing, Burckhardt et al. 2010).
	PCT
)

func (s Strategy) String() string {
	if s == PCT {
		return "pct"
	}
	return "random"
}

// ParseStrategy parses "random" or "pct".
func ParseStrategy(s string) (Strategy, error) {
	switch s {
	case "random", "":
		return RandomWalk, nil
	case "pct":
		return PCT, nil
	}
	return 0, fmt.Errorf("sim: strategy %q: must be random or pct", s)
}

// picker is a strategy's state.
type picker interface {
	pick(ready []int, step int) int
}

type randomWalk struct{ rng *rand.Rand }

func (p *randomWalk) pick(ready []int, _ int) int { return ready[p.rng.IntN(len(ready))] }

// pct keeps a priority per rank; change points are chosen steps at which
// the rank then running drops below every other.
type pct struct {
	prio    []int
	changes map[int]bool
	low     int
	last    int
}

func newPCT(rng *rand.Rand, n, depth, horizon int) *pct {
	p := &pct{prio: make([]int, n), changes: map[int]bool{}, last: -1}
	perm := rng.Perm(n)
	for i, r := range perm {
		p.prio[r] = n + i // distinct, above every lowered priority
	}
	for range max(depth-1, 0) {
		p.changes[1+rng.IntN(max(horizon, 1))] = true
	}
	return p
}

func (p *pct) pick(ready []int, step int) int {
	if p.changes[step] && p.last >= 0 {
		p.low--
		p.prio[p.last] = p.low
	}
	best := ready[0]
	for _, r := range ready[1:] {
		if p.prio[r] > p.prio[best] {
			best = r
		}
	}
	p.last = best
	return best
}

// DeadlockError is a run that reached a state where every rank waits for
// something no rank or pending event can bring: it names every parked rank
// and what it waits on, and every rank that had already returned, at the
// virtual time it was found.
type DeadlockError struct {
	At       time.Duration // virtual time since the start
	Ranks    []RankWait
	Returned []RankReturn
}

// RankWait is one parked rank of a deadlock.
type RankWait struct {
	Rank int    // world rank
	What string // what the backend waits on (a checked collective is one Allgather here)
	// Op is the operation the rank's own code is in, from its flight
	// recorder (checked worlds): "Barrier #2 on world at main.go:40
	// (main.step)"; "" when unknown or the same as What.
	Op    string
	Since time.Duration
}

// RankReturn is a rank whose function had returned when the others
// deadlocked: often the cause (it left without entering what they wait in).
type RankReturn struct {
	Rank int // world rank
	At   time.Duration
	Err  error  // what it returned (nil: success)
	Last string // its last recorded operation, when checked
}

func (e *DeadlockError) Error() string {
	var b strings.Builder
	waiting := "every rank waits"
	if len(e.Returned) > 0 {
		waiting = "every rank still running waits"
	}
	fmt.Fprintf(&b, "sim: deadlock at %v: %s and nothing pending can wake one:", e.At, waiting)
	for _, r := range e.Ranks {
		if r.Op != "" {
			fmt.Fprintf(&b, " rank %d in %s (the backend's %s) since %v;", r.Rank, r.Op, r.What, r.Since)
		} else {
			fmt.Fprintf(&b, " rank %d in %s since %v;", r.Rank, r.What, r.Since)
		}
	}
	for _, r := range e.Returned {
		how := "without error"
		if r.Err != nil {
			how = fmt.Sprintf("with %v", r.Err)
		}
		fmt.Fprintf(&b, " rank %d returned at %v %s, so it never enters what the others wait in", r.Rank, r.At, how)
		if r.Last != "" {
			fmt.Fprintf(&b, " (its last operation: %s)", r.Last)
		}
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Is makes errors.Is(err, ErrDeadlock) hold.
func (e *DeadlockError) Is(target error) bool { return target == ErrDeadlock }

// ErrorKind names the error's kind in a run's report ("deadlock"), for
// callers that import no backend (executor.ErrorKind).
func (e *DeadlockError) ErrorKind() string { return "deadlock" }

// userOp is the collective world rank r's own code is in, from its flight
// recorder: the checked layer records the caller's operation (a Barrier),
// where the backend sees the one Allgather that carries its stamp. "" when
// the world keeps no records or the rank is in none.
func (w *world) userOp(r int) string {
	if w.recorders == nil {
		return ""
	}
	recs := w.recorders[r].Snapshot()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].InProgress() && recs[i].Kind != flight.KindSend && recs[i].Kind != flight.KindRecv {
			return fmt.Sprintf("%s #%d on %s at %s", recs[i].Kind, recs[i].Seq, recs[i].Group, recs[i].Site)
		}
	}
	return ""
}

// lastOp is world rank r's last recorded collective ("" when none).
func (w *world) lastOp(r int) string {
	if w.recorders == nil {
		return ""
	}
	recs := w.recorders[r].Snapshot()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Kind != flight.KindSend && recs[i].Kind != flight.KindRecv {
			return recs[i].String()
		}
	}
	return ""
}
