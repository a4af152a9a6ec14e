package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	r       *round.Round
	// arrived counts the members of the open round; waiting marks them.
	arrived int
	waiting []bool
	// opened counts rounds that every member entered (combined); done
	// counts rounds whose modelled completion time has come: a member of
	// round k may read the result once done >= k.
	opened, done uint64
	resErr       error
	broken       error
	bytes        int // the open round's payload (for the link model)
	boxes        []mailbox
	splits       []int // Splits made on this communicator, per member
	// snap is the last allgather's result as every member of a large
	// group reads it (gathered), for round snapRound.
	snap      *comm.Gathered
	snapRound uint64
}

// shareFrom is the group size from which an allgather hands every member
// that only reads its result (checked mode's stamp exchange:
// comm.Gathered.Shareable) one copy of it (Share) instead of a copy each:
// at 4096 ranks a copy each is 4096 times the result, on every world
// collective. A caller's own Gathered always gets a copy.
const shareFrom = 64

// gathered is the completed allgather's result, copied out of the round
// once (the next round overwrites the round's buffers; members of a large
// group keep a view of this copy).
func (g *group) gathered() *comm.Gathered {
	if g.snap == nil || g.snapRound != g.done {
		snap := new(comm.Gathered)
		copy(snap.Reset(g.r.Gather.Counts), g.r.Gather.Flat)
		g.snap, g.snapRound = snap, g.done
	}
	return g.snap
}

func newGroup(w *world, name string, members []int) *group {
	n := len(members)
	return &group{w: w, name: name, members: members, r: round.New(n), waiting: make([]bool, n),
		boxes: make([]mailbox, n), splits: make([]int, n)}
}

// groupFor returns the shared group named name, creating it on first use.
func (w *world) groupFor(name string, members []int) (*group, error) {
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

// round runs one collective round for group rank r (deposit stores its
// contribution, bytes its payload size): the last arriver combines, and
// every member may read the result when the link model's time for the
// collective has passed. A member that waits longer than the collective
// timeout (virtual) breaks the group with a *comm.TimeoutError naming the
// ranks that never arrived. Arrival and completion are scheduling points.
func (g *group) round(ctx context.Context, r int, kind flight.Kind, bytes int, deposit func()) error {
	w := g.w
	me := w.ranks[g.members[r]]
	if g.broken != nil {
		if errors.Is(g.broken, comm.ErrBroken) {
			return g.broken
		}
		return fmt.Errorf("%w (group %q): %w", comm.ErrBroken, g.name, g.broken)
	}
	deposit()
	g.arrived++
	g.waiting[r] = true
	g.bytes = max(g.bytes, bytes)
	mine := g.opened + 1
	if g.arrived == len(g.members) {
		g.resErr = g.r.Combine(g.name, g.members)
		if g.resErr != nil {
			g.broken = g.resErr
		}
		g.arrived = 0
		g.opened++
		clear(g.waiting)
		cost := w.cfg.Fabric.Collective(kind, g.members, g.bytes)
		g.bytes = 0
		finish := func() {
			g.done = mine
			for _, m := range g.members {
				w.wake(w.ranks[m])
			}
		}
		if cost == 0 {
			finish()
		} else {
			w.at(w.now.Add(cost), true, finish)
		}
	}
	bound := w.cfg.Timeout + kit.GraceOf(ctx)
	deadline := w.now.Add(bound)
	for g.done < mine {
		if g.broken != nil && g.opened < mine {
			return g.brokenFor(r)
		}
		if ctx.Err() != nil {
			if g.opened < mine { // leaving an open round breaks it
				g.breakWith(fmt.Errorf("%w: group %q: rank %d left a collective: %w", comm.ErrBroken, g.name, r, context.Cause(ctx)))
				g.waiting[r] = false
			}
			return fmt.Errorf("sim: group %q rank %d: %w", g.name, r, context.Cause(ctx))
		}
		if g.opened < mine && !w.now.Before(deadline) {
			te := &comm.TimeoutError{Group: g.name, Self: r, Waiting: comm.Entry{Rank: r, Seq: mine, Kind: kind},
				Bound: bound, WorldRanks: slices.Clone(g.members)}
			for i, in := range g.waiting {
				if !in {
					te.Missing = append(te.Missing, i)
				}
			}
			g.breakWith(te)
			g.waiting[r] = false
			return te
		}
		wait := deadline
		if g.opened >= mine {
			wait = time.Time{} // combined: its completion event comes
		}
		w.park(me, waitOn{kind: kind, seq: mine, g: g}, wait, false)
	}
	if g.resErr != nil {
		return g.resErr
	}
	w.yield(me) // completion is a scheduling point too
	return nil
}

// breakWith marks the group broken and wakes its waiting members.
func (g *group) breakWith(err error) {
	if g.broken == nil {
		g.broken = err
	}
	for i, in := range g.waiting {
		if in {
			g.waiting[i] = false
			g.w.wake(g.w.ranks[g.members[i]])
		}
	}
	g.arrived = 0
}

// brokenFor is the error a member of a broken round gets: a timeout is
// reported to each rank as its own.
func (g *group) brokenFor(r int) error {
	if te, ok := g.broken.(*comm.TimeoutError); ok {
		cp := *te
		cp.Self, cp.Waiting.Rank = r, r
		return &cp
	}
	return g.broken
}
