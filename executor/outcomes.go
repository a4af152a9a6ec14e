package executor

import "github.com/rankrun/rankrun/request"

// outcomeTally decides, from the transfer outcomes the ranks of an
// executor group report, when the group as a whole knows how a request's
// transfer ended. Each rank that holds a request reports the outcome its
// consensus scope agreed for it, exactly once; the request is decided when
// all of its holders have reported, with the precedence of DESIGN.md §4
// (cancelled > failed > completed). It is pure bookkeeping: fed the same
// reports in the same order (an allgather's result, identical on every
// rank), every rank decides the same requests in the same iteration, so
// what a rank does next (decode or wait) is derived from agreed values only.
type outcomeTally struct {
	holders int // reports a request needs (the ranks that hold it)
	pending map[request.ID]*tallyEntry
	// decidedAfter is how many reports the last decided request had.
	decidedAfter int
}

type tallyEntry struct {
	reports int
	status  request.Status
}

func newOutcomeTally(holders int) outcomeTally {
	return outcomeTally{holders: max(holders, 1), pending: map[request.ID]*tallyEntry{}}
}

// add records one holder's report for id. When it completes the set, add
// returns true with the group's verdict and forgets id.
func (t *outcomeTally) add(id request.ID, st request.Status) (request.Status, bool) {
	e := t.pending[id]
	if e == nil {
		e = &tallyEntry{}
		t.pending[id] = e
	}
	e.reports++
	e.status = request.Worse(e.status, st)
	if e.reports < t.holders {
		return request.Pending, false
	}
	delete(t.pending, id)
	t.decidedAfter = e.reports
	return e.status, true
}
