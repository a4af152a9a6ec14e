// Package clock is the one source of time for rankrun's cores (executor,
// transceiver, consensus, comm/local): every read of the time, every timed
// wait and every deadline goes through a Clock handed in with the
// configuration, never through package time directly. The real clock is
// the default; tests use a Manual clock that moves only when told, and the
// simulation backend (comm/sim) a virtual clock that moves only when every
// rank is blocked.
//
// Deadlines are explicit times passed to Waiter.Wait, not context
// deadlines: contexts carry cancellation only, so a clock other than the
// real one never has to fake a context.
//
// A Clock is safe for concurrent use; a Waiter belongs to one goroutine.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and makes waiters.
type Clock interface {
	// Now is the current time on this clock.
	Now() time.Time
	// NewWaiter returns a reusable timed wait for one goroutine.
	NewWaiter() Waiter
}

// Waiter is a reusable timed wait, owned by one goroutine.
type Waiter interface {
	// Wait blocks until a token can be taken from ev (when ev is not nil),
	// the deadline passes (never, when deadline is zero), or ctx ends. It
	// returns ctx's cause when ctx ended first, nil otherwise; it returns at
	// once when the deadline has already passed.
	Wait(ctx context.Context, ev <-chan struct{}, deadline time.Time) error
	// Stop releases the waiter's resources. It is idempotent.
	Stop()
}

// Since is the time elapsed on c since t.
func Since(c Clock, t time.Time) time.Duration {
	if _, ok := c.(realClock); ok {
		return time.Since(t) // the monotonic reading alone: half the cost of Now
	}
	return c.Now().Sub(t)
}

// Sleep waits d on c, or until ctx ends (then it returns ctx's cause). A
// duration <= 0 returns at once.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	w := c.NewWaiter()
	defer w.Stop()
	return w.Wait(ctx, nil, c.Now().Add(d))
}

// Or returns c, or the real clock when c is nil: the default of every
// configuration that takes a Clock.
func Or(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

// Real is the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time    { return time.Now() }
func (realClock) NewWaiter() Waiter { return &realWaiter{} }

// realWaiter keeps one timer armed across waits: a wait whose deadline is
// no earlier than the armed time leaves the timer alone (no Reset, no Stop,
// no clock read), and a timer that fires for an earlier wait's deadline is
// re-armed for this one. Collective waits, each bounded by now+timeout,
// then touch the timer about once per timeout instead of twice per wait
// (BenchmarkAllreduce1 in comm/local).
type realWaiter struct {
	t     *time.Timer
	armed time.Time // when t fires; zero when it is not armed
}

func (w *realWaiter) Wait(ctx context.Context, ev <-chan struct{}, deadline time.Time) error {
	for {
		var tc <-chan time.Time
		if !deadline.IsZero() {
			if w.armed.IsZero() || w.armed.After(deadline) {
				d := time.Until(deadline)
				if d <= 0 {
					return ctx.Err()
				}
				if w.t == nil {
					w.t = time.NewTimer(d)
				} else {
					w.t.Reset(d)
				}
				w.armed = deadline
			} else {
				// Armed no later than this deadline: if the timer has
				// fired, this deadline may have passed too, and a wait
				// past its deadline returns at once without taking ev.
				// (Between a deadline and its timer's firing, a wait may
				// still take a ready ev, as any wait racing its deadline.)
				select {
				case <-w.t.C:
					w.armed = time.Time{}
					if !time.Now().Before(deadline) {
						return ctx.Err()
					}
					continue // an earlier wait's deadline: arm for this one
				default:
				}
			}
			tc = w.t.C
		}
		select {
		case <-ev:
		case <-tc:
			w.armed = time.Time{}
			if time.Now().Before(deadline) {
				continue // an earlier wait's deadline: wait on for this one
			}
		case <-ctx.Done():
		}
		// Several may be ready at once: the answer must not depend on which
		// one select picked. A context that ended wins.
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
}

func (w *realWaiter) Stop() {
	if w.t != nil {
		w.t.Stop()
	}
	w.armed = time.Time{}
}
