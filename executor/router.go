package executor

import (
	"time"

	"github.com/rankrun/rankrun/request"
)

// router is the workload's client, run by world rank 0: it releases the
// requests as they arrive (open loop: at their times; closed loop: when an
// outstanding one finishes), routes each to the CTX group of its DP index,
// and counts the finished ones. Its methods are nil-safe: on every other
// rank the router is nil and nothing is released.
type router struct {
	reqs    []Req
	next    int // requests released so far
	done    int // requests finished
	arrival Arrival
	ctxDP   int
	genDP   int
	freed   []int64 // closed loop: when each finished request freed a slot
}

func newRouter(w Workload, ctxDP, genDP int) *router {
	return &router{reqs: w.Generate(), arrival: w.Arrival, ctxDP: ctxDP, genDP: genDP}
}

// release hands every request due at now (ns since the start) to emit, in
// order, stamped with its arrival time.
func (rt *router) release(now int64, emit func(rec) error) error {
	if rt == nil {
		return nil
	}
	for rt.next < len(rt.reqs) {
		q := rt.reqs[rt.next]
		switch rt.arrival.Kind {
		case Closed:
			if rt.next-rt.done >= rt.arrival.Concurrency {
				return nil
			}
		case Rate, Poisson, Traced:
			if q.At.Nanoseconds() > now {
				return nil
			}
		}
		rt.next++
		arrival := now
		switch rt.arrival.Kind {
		case Rate, Poisson, Traced:
			arrival = q.At.Nanoseconds()
		case Closed:
			if len(rt.freed) > 0 {
				arrival = min(rt.freed[0], now)
				rt.freed = rt.freed[1:]
			}
		}
		r := rec{Kind: msgRoute, ID: q.ID, Tokens: int64(q.Tokens), Output: int64(q.Output),
			CtxDP: int64((uint64(q.ID) - 1) % uint64(rt.ctxDP)), GenDP: int64((uint64(q.ID) - 1) % uint64(rt.genDP)), Arrival: arrival}
		if err := emit(r); err != nil {
			return err
		}
	}
	return nil
}

// finished counts a request the GEN side finished at (ns since the start).
// In a closed loop the client sends its next request the moment one
// finishes, whether or not the router is looking.
func (rt *router) finished(_ request.ID, at int64) {
	rt.done++
	rt.freed = append(rt.freed, at)
}

// nextArrival is when the next open-loop request arrives, as an offset from
// the start (ok false: none scheduled).
func (rt *router) nextArrival() (time.Duration, bool) {
	if rt == nil || rt.next >= len(rt.reqs) || !rt.arrival.open() {
		return 0, false
	}
	return rt.reqs[rt.next].At, true
}

// releasable reports whether a request could be released at now.
func (rt *router) releasable(now int64) bool {
	if rt == nil || rt.next >= len(rt.reqs) {
		return false
	}
	switch rt.arrival.Kind {
	case Closed:
		return rt.next-rt.done < rt.arrival.Concurrency
	case Burst:
		return true
	}
	return rt.reqs[rt.next].At.Nanoseconds() <= now
}

// allDone reports whether every request was released and finished (true
// where there is no router).
func (rt *router) allDone() bool {
	return rt == nil || (rt.next == len(rt.reqs) && rt.done == len(rt.reqs))
}
