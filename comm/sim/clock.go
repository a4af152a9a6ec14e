package sim

import (
	"context"
	"time"

	"github.com/rankrun/rankrun/clock"
)

// rankClock is one rank's view of virtual time: Now is the world's virtual
// time; a wait parks the rank, so virtual time moves only when every rank
// waits. It must be used only by its rank's goroutine.
type rankClock struct {
	w *world
	r *rankState
}

var _ clock.Clock = (*rankClock)(nil)

func (c *rankClock) Now() time.Time          { return c.w.now }
func (c *rankClock) NewWaiter() clock.Waiter { return &waiter{c: c} }

type waiter struct{ c *rankClock }

// Wait parks the rank until a token can be taken from ev (ev must be nil or
// the rank's own completion-event channel, Notify), the deadline passes, or
// ctx ends. Each return is a scheduling point.
func (wt *waiter) Wait(ctx context.Context, ev <-chan struct{}, deadline time.Time) error {
	w, r := wt.c.w, wt.c.r
	for {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if ev != nil {
			select {
			case <-ev:
				return nil
			default:
			}
		}
		if !deadline.IsZero() && !w.now.Before(deadline) {
			return nil
		}
		r.onNotify = ev != nil
		what := waitOn{text: "a timed wait"}
		if ev != nil {
			what.text = "a wait for its transfer events"
		}
		w.park(r, what, deadline, true)
	}
}

func (wt *waiter) Stop() {}
