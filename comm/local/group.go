package local

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/kit"
	"github.com/rankrun/rankrun/comm/internal/round"
)

// group is the state shared by the members of one communicator.
type group struct {
	w       *world
	name    string
	members []int // world rank of each group rank

	mu      sync.Mutex
	gen     uint64 // completed rounds
	arrived int
	broken  error
	wake    []chan struct{} // one per group rank, buffered 1
	waiting []bool          // arrived in the current round

	// The current round's contributions and the last round's results
	// (see round.Round for when a woken rank may read them unlocked).
	r      *round.Round
	resErr error

	boxes []mailbox
}

func newGroup(w *world, name string, members []int) *group {
	n := len(members)
	g := &group{
		w: w, name: name, members: members,
		wake: make([]chan struct{}, n), waiting: make([]bool, n), r: round.New(n),
		boxes: make([]mailbox, n),
	}
	for i := range g.wake {
		g.wake[i] = make(chan struct{}, 1)
	}
	return g
}

// round runs one collective round for group rank r: deposit has stored
// r's contribution (under g.mu); the last arriver calls combine. round
// returns once the round completed (or failed) and leaves reading the
// result to the caller. A rank that waits longer than the world's
// collective timeout (on w's clock, through the caller's waiter) breaks the
// group with a *comm.TimeoutError naming the ranks that never arrived.
func (g *group) round(ctx context.Context, r int, wt clock.Waiter, stamp []int64, kind flight.Kind, deposit func()) error {
	g.mu.Lock()
	if g.broken != nil {
		err := g.broken
		g.mu.Unlock()
		if errors.Is(err, comm.ErrBroken) {
			return err
		}
		return fmt.Errorf("%w (group %q): %w", comm.ErrBroken, g.name, err)
	}
	deposit()
	g.r.Stamp[r] = stamp
	g.arrived++
	g.waiting[r] = true
	if g.arrived == len(g.members) {
		g.resErr = g.r.Combine(g.name, g.members)
		g.arrived = 0
		g.gen++
		for i, wt := range g.waiting {
			if wt {
				g.waiting[i] = false
				if i != r {
					g.wake[i] <- struct{}{}
				}
			}
		}
		err := g.resErr
		if err != nil {
			g.broken = err
		}
		g.mu.Unlock()
		return err
	}
	myGen := g.gen
	if te := g.leftByReturnedLocked(ctx, r, kind); te != nil {
		g.mu.Unlock()
		return te
	}
	g.mu.Unlock()

	bound := g.w.cfg.Timeout + kit.GraceOf(ctx)
	deadline := g.w.cfg.Clock.Now().Add(bound)
	for {
		werr := wt.Wait(ctx, g.wake[r], deadline)
		g.mu.Lock()
		if g.gen != myGen || g.broken != nil {
			// Completed (or broke). Its token was sent under g.mu: it is
			// either taken by the wait or still in the channel. Take it.
			select {
			case <-g.wake[r]:
			default:
			}
			err := g.resErr // the round completed (nil, or combine's error)
			if g.gen == myGen {
				err = g.brokenFor(r) // it broke while we waited
			}
			g.mu.Unlock()
			return err
		}
		switch {
		case werr != nil:
			err := fmt.Errorf("%w: group %q: rank %d left a collective: %w", comm.ErrBroken, g.name, r, context.Cause(ctx))
			g.breakLocked(err)
			g.waiting[r] = false
			g.mu.Unlock()
			return fmt.Errorf("local: group %q rank %d: %w", g.name, r, context.Cause(ctx))
		case !g.w.cfg.Clock.Now().Before(deadline):
			te := &comm.TimeoutError{Group: g.name, Self: r,
				Waiting: comm.Entry{Rank: r, Seq: g.gen + 1, Kind: kind},
				Bound:   bound, WorldRanks: slices.Clone(g.members)}
			for i, arrived := range g.waiting {
				if !arrived {
					te.Missing = append(te.Missing, i)
					if g.w.returned[g.members[i]].Load() {
						// Unchecked worlds keep no records, but this
						// much the world knows (checked mode asks the
						// stall inspector for the rest).
						te.Peers = append(te.Peers, comm.PeerRecords{Rank: i, Returned: true})
					}
				}
			}
			g.breakLocked(te)
			g.waiting[r] = false
			g.mu.Unlock()
			return te
		}
		if te := g.leftByReturnedLocked(ctx, r, kind); te != nil {
			g.mu.Unlock()
			return te
		}
		g.mu.Unlock() // woken without the round done: wait on
	}
}

// leftByReturnedLocked breaks the round rank r waits in, at once, when a
// member that has not arrived has returned from its program: it enters
// nothing more, so waiting out the collective bound for it only delays
// the same verdict (and names the same rank). The error is the timeout's,
// with no bound run out, so that every caller that tells a missing peer
// from a desync reads it as before. nil when no such member, or when ctx
// has ended (a rank that failed cancels the run as it returns: its
// peers leave with its error, not this one). Caller holds g.mu.
func (g *group) leftByReturnedLocked(ctx context.Context, r int, kind flight.Kind) error {
	if ctx.Err() != nil {
		return nil
	}
	gone := false
	for i, arrived := range g.waiting {
		if !arrived && g.w.returned[g.members[i]].Load() {
			gone = true
		}
	}
	if !gone {
		return nil
	}
	te := &comm.TimeoutError{Group: g.name, Self: r, Waiting: comm.Entry{Rank: r, Seq: g.gen + 1, Kind: kind},
		WorldRanks: slices.Clone(g.members)}
	for i, arrived := range g.waiting {
		// Only the returned are missing for good: a member still running
		// may only be late, and gets the broken group's error when it
		// arrives.
		if !arrived && g.w.returned[g.members[i]].Load() {
			te.Missing = append(te.Missing, i)
			te.Peers = append(te.Peers, comm.PeerRecords{Rank: i, Returned: true})
		}
	}
	g.breakLocked(te)
	g.waiting[r] = false
	return te
}

// wakeWaiting wakes every rank waiting in a round of g, so that it sees
// what changed (a member returned). It takes g.mu.
func (g *group) wakeWaiting() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, wt := range g.waiting {
		if wt {
			select {
			case g.wake[i] <- struct{}{}:
			default:
			}
		}
	}
}

// brokenFor is the error a rank of a broken group gets: a collective
// timeout is reported to each rank as its own (Self is that rank). Caller
// holds g.mu.
func (g *group) brokenFor(r int) error {
	if te, ok := g.broken.(*comm.TimeoutError); ok {
		cp := *te
		cp.Self, cp.Waiting.Rank = r, r
		return &cp
	}
	return g.broken
}

// breakLocked marks the group broken and wakes every rank waiting in the
// current round. Caller holds g.mu.
func (g *group) breakLocked(err error) {
	if g.broken == nil {
		g.broken = err
	}
	for i, wt := range g.waiting {
		if wt {
			g.waiting[i] = false
			select {
			case g.wake[i] <- struct{}{}:
			default:
			}
		}
	}
	g.arrived = 0
}
