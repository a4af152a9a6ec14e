package clock

import (
	"context"
	"sync"
	"time"
)

// Manual is a clock for tests: its time moves only when Advance or Set is
// called. A waiter whose deadline has not come waits for its event or its
// context, however long that takes in real time; so a test that never
// advances the clock proves a wait ended on an event, not on a timer.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	waiting map[*manualWaiter]struct{}
	changed chan struct{} // closed and replaced whenever a waiter parks
}

// NewManual returns a manual clock reading start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start, waiting: map[*manualWaiter]struct{}{}, changed: make(chan struct{})}
}

// Now implements Clock.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Advance moves the clock forward by d and wakes every waiter whose
// deadline has come.
func (m *Manual) Advance(d time.Duration) { m.Set(m.Now().Add(d)) }

// Set moves the clock to t (never backwards) and wakes every waiter whose
// deadline has come.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.Before(m.now) {
		return
	}
	m.now = t
	for w := range m.waiting {
		if !w.deadline.IsZero() && !w.deadline.After(t) {
			delete(m.waiting, w)
			close(w.fired)
		}
	}
}

// Waiters is how many goroutines are waiting on the clock now.
func (m *Manual) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiting)
}

// AwaitWaiters blocks until at least n goroutines wait on the clock (for a
// test that must act once a wait has begun), or ctx ends.
func (m *Manual) AwaitWaiters(ctx context.Context, n int) error {
	for {
		m.mu.Lock()
		got, ch := len(m.waiting), m.changed
		m.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// NewWaiter implements Clock.
func (m *Manual) NewWaiter() Waiter { return &manualWaiter{m: m} }

type manualWaiter struct {
	m        *Manual
	deadline time.Time
	fired    chan struct{}
}

func (w *manualWaiter) Wait(ctx context.Context, ev <-chan struct{}, deadline time.Time) error {
	m := w.m
	m.mu.Lock()
	if !deadline.IsZero() && !deadline.After(m.now) {
		m.mu.Unlock()
		return ctx.Err()
	}
	w.deadline, w.fired = deadline, make(chan struct{})
	m.waiting[w] = struct{}{}
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiting, w)
		m.mu.Unlock()
	}()
	select {
	case <-ev:
	case <-w.fired:
	case <-ctx.Done():
	}
	if ctx.Err() != nil { // a context that ended wins, whatever select picked
		return context.Cause(ctx)
	}
	return nil
}

func (w *manualWaiter) Stop() {}
