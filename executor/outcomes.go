package executor

import "github.com/rankrun/rankrun/transceiver"

// outcomeTally decides, from the transfer outcomes the ranks of an
// executor group report, when the group as a whole knows how a request's
// transfer ended. Each rank that holds a request reports the outcome its
// consensus scope agreed for it, exactly once; the request is decided when
// all of its holders have reported, with the precedence of DESIGN.md §4
// (cancelled > failed > transferred). It is pure bookkeeping: fed the same
// reports in the same order (an allgather's result, identical on every
// rank), every rank decides the same requests in the same iteration, so
// what a rank does next (decode or wait) is derived from agreed values only.
type outcomeTally struct {
	holders int // reports a request needs (the ranks that hold it)
	pending map[uint64]*tallyEntry
}

type tallyEntry struct {
	reports int
	state   transceiver.State
}

func newOutcomeTally(holders int) outcomeTally {
	return outcomeTally{holders: max(holders, 1), pending: map[uint64]*tallyEntry{}}
}

// add records one holder's report for id. When it completes the set, add
// returns true with the group's verdict and forgets id.
func (t *outcomeTally) add(id uint64, st transceiver.State) (transceiver.State, bool) {
	e := t.pending[id]
	if e == nil {
		e = &tallyEntry{state: st}
		t.pending[id] = e
	}
	e.reports++
	// Terminal states are ordered by precedence: transferred < failed <
	// cancelled.
	e.state = max(e.state, st)
	if e.reports < t.holders {
		return 0, false
	}
	delete(t.pending, id)
	return e.state, true
}
