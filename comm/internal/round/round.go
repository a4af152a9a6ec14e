// Package round is the pure part of a collective round that the in-process
// backends share (comm/local, comm/sim): each rank deposits its
// contribution, the last to arrive combines them, every rank reads the
// result. Blocking, waking and time are the backends' business.
package round

import (
	"fmt"
	"slices"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/kit"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// Round holds the contributions of the current round by group rank, and
// the results of the last completed round. A result stays valid until the
// next round completes, which needs every member to arrive again, so a
// woken rank may read it without a lock.
type Round struct {
	Kind  []flight.Kind
	Op    []comm.ReduceOp
	In    [][]int64
	Root  []int
	Bytes [][]byte
	Color []int
	Key   []int
	// Ops: each rank's typed collective (typed.Op), nil for the others.
	Ops []*typed.Op
	// Stamp is checked mode's stamp of each rank's collective, where the
	// backend compares stamps in the round itself (checked mode's stamp comparer); nil
	// when the rank gave none.
	Stamp [][]int64
	// Agreed: every rank gave the same stamp (or none did). When they
	// differ the round combines nothing and reports no error: checked
	// mode names the desync.
	Agreed bool

	Ints   []int64       // Allreduce
	Gather comm.Gathered // Allgather
	Out    []byte        // Bcast
	// Split: each rank's position in its color's new group, and each
	// color's members (group ranks, in new-rank order).
	pos    []int
	colors map[int][]int // color -> the world ranks of its group, in new-rank order
}

// New returns a round for a group of n ranks.
func New(n int) *Round {
	return &Round{Kind: make([]flight.Kind, n), Op: make([]comm.ReduceOp, n), In: make([][]int64, n),
		Root: make([]int, n), Bytes: make([][]byte, n), Color: make([]int, n), Key: make([]int, n), Stamp: make([][]int64, n),
		Ops: make([]*typed.Op, n)}
}

// Combine computes the round's result from every rank's contribution
// (members: the world rank of each group rank); a mismatch between ranks
// (different kinds, shapes or roots) is an error wrapping comm.ErrDesync.
func (r *Round) Combine(group string, members []int) error {
	// Stamps first: ranks whose stamps differ may be in different
	// collectives, whose contributions must not be combined.
	r.Agreed = true
	for i := 1; i < len(r.Stamp); i++ {
		if !slices.Equal(r.Stamp[i], r.Stamp[0]) {
			r.Agreed = false
			break
		}
	}
	clear(r.Stamp)
	if !r.Agreed {
		r.clearInputs()
		return nil
	}
	k := r.Kind[0]
	isTyped := r.Ops[0] != nil
	for i, p := range r.Ops {
		if (p != nil) != isTyped {
			defer r.clearInputs()
			return fmt.Errorf("%w: group %q: %s entered %s but %s entered %s, one of them a typed collective (unchecked mode cannot name call sites; run checked)",
				comm.ErrDesync, group, kit.Who(members, 0), k, kit.Who(members, i), r.Kind[i])
		}
	}
	if isTyped {
		defer r.clearInputs()
		return r.combineTyped(group, members)
	}
	for i, ki := range r.Kind {
		if ki != k {
			return fmt.Errorf("%w: group %q: %s entered %s but %s entered %s (unchecked mode cannot name call sites; run checked)",
				comm.ErrDesync, group, kit.Who(members, 0), k, kit.Who(members, i), ki)
		}
	}
	defer r.clearInputs()
	switch k {
	case flight.KindBarrier:
	case flight.KindAllreduce:
		n := len(r.In[0])
		for i := range r.In {
			if len(r.In[i]) != n || r.Op[i] != r.Op[0] {
				return fmt.Errorf("%w: group %q: Allreduce %s has %d x %s, %s has %d x %s",
					comm.ErrDesync, group, kit.Who(members, 0), n, r.Op[0], kit.Who(members, i), len(r.In[i]), r.Op[i])
			}
		}
		r.Ints = append(r.Ints[:0], r.In[0]...)
		for i := 1; i < len(r.In); i++ {
			typed.Apply(r.Op[0], r.Ints, r.In[i])
		}
	case flight.KindAllgather:
		flat := r.Gather.ResetFunc(len(r.In), func(i int) int { return len(r.In[i]) })
		off := 0
		for _, in := range r.In {
			off += copy(flat[off:], in)
		}
	case flight.KindBcast:
		root := r.Root[0]
		for i := range r.Root {
			if r.Root[i] != root {
				return fmt.Errorf("%w: group %q: Bcast %s has root %d, %s has root %d", comm.ErrDesync, group, kit.Who(members, 0), root, kit.Who(members, i), r.Root[i])
			}
		}
		r.Out = append(r.Out[:0], r.Bytes[root]...)
	case flight.KindSplit:
		r.split(members)
	}
	return nil
}

func (r *Round) clearInputs() {
	for i := range r.In {
		r.In[i] = nil
		r.Bytes[i] = nil
		r.Ops[i] = nil
	}
}

// split groups the ranks by color, each group ordered by key then rank, once
// for the whole round (every member reads its own group from it, shared).
func (r *Round) split(members []int) {
	n := len(r.Color)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if r.Color[a] != r.Color[b] {
			return r.Color[a] - r.Color[b]
		}
		return r.Key[a] - r.Key[b]
	})
	r.pos = slices.Grow(r.pos[:0], n)[:n]
	r.colors = map[int][]int{}
	for _, i := range order {
		c := r.Color[i]
		r.pos[i] = len(r.colors[c])
		r.colors[c] = append(r.colors[c], members[i])
	}
}

// SplitResult is, after a Split round, the members (world ranks, a slice
// shared by the whole new group: do not modify it) of rank's new group and
// rank's index in it.
func (r *Round) SplitResult(rank int) (members []int, newRank int) {
	return r.colors[r.Color[rank]], r.pos[rank]
}
