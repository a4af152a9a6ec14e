package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRealWaiter(t *testing.T) {
	c := clock.Real()
	w := c.NewWaiter()
	defer w.Stop()
	ev := make(chan struct{}, 1)
	ev <- struct{}{}
	require.NoError(t, w.Wait(t.Context(), ev, time.Time{}), "an event ends the wait")
	require.NoError(t, w.Wait(t.Context(), ev, c.Now().Add(time.Millisecond)), "the deadline ends the wait")
	require.NoError(t, w.Wait(t.Context(), nil, c.Now().Add(-time.Second)), "a past deadline returns at once")
	ctx, cancel := context.WithCancelCause(t.Context())
	why := errors.New("stop")
	cancel(why)
	require.ErrorIs(t, w.Wait(ctx, nil, time.Time{}), why, "a cancelled context returns its cause")
	require.NoError(t, clock.Sleep(t.Context(), c, 0))
}

// TestRealWaiterKeepsItsTimerAcrossWaits: the waiter leaves its timer armed
// from one wait to the next, so a wait must neither end at an earlier
// wait's deadline nor outlive its own when that is the nearer one.
func TestRealWaiterKeepsItsTimerAcrossWaits(t *testing.T) {
	c := clock.Real()
	w := c.NewWaiter()
	defer w.Stop()
	ev := make(chan struct{}, 1)
	// armByEvent arms the waiter 5 ms out and ends that wait with an
	// event, leaving the timer armed; it returns when it armed. A host
	// that takes the 5 ms before the wait looks has the wait pass its
	// deadline instead, leaving the token: drained, and tried again.
	armByEvent := func() time.Time {
		for range 500 {
			t0 := c.Now()
			ev <- struct{}{}
			require.NoError(t, w.Wait(t.Context(), ev, t0.Add(5*time.Millisecond)))
			if !drain(ev) {
				return t0
			}
		}
		require.FailNow(t, "no wait of 500 reached its event within 5 ms")
		return time.Time{}
	}

	// Armed 5 ms out, ended by an event; the next wait, 40 ms out, must
	// last its 40 ms although the timer fires at 5 ms.
	armByEvent()
	start := c.Now()
	deadline := start.Add(40 * time.Millisecond)
	require.NoError(t, w.Wait(t.Context(), nil, deadline))
	require.False(t, c.Now().Before(deadline), "returned %v after the start, before its deadline of 40ms", c.Now().Sub(start))

	// Armed an hour out, ended by an event; a wait 10 ms out must end by
	// its own deadline, not the hour (bounded here by a 10 s context,
	// which the wait would return the cause of).
	ev <- struct{}{}
	require.NoError(t, w.Wait(t.Context(), ev, c.Now().Add(time.Hour)))
	deadline = c.Now().Add(10 * time.Millisecond)
	bound, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, w.Wait(bound, nil, deadline), "the wait outlived its deadline")
	require.False(t, c.Now().Before(deadline))

	// A wait past its deadline returns at once and leaves ev's token,
	// also when the timer is still armed for an earlier deadline and has
	// fired (select would pick the token half the time).
	for range 50 {
		t0 := armByEvent()                                                   // armed for t0+5ms, ended by the event
		require.NoError(t, clock.Sleep(t.Context(), c, 15*time.Millisecond)) // the armed timer fires meanwhile
		ev <- struct{}{}
		require.NoError(t, w.Wait(t.Context(), ev, t0.Add(10*time.Millisecond))) // passed, and after the armed time
		require.Len(t, ev, 1, "a wait past its deadline took the event")
		<-ev
	}

	// After Stop the waiter is reusable.
	w.Stop()
	deadline = c.Now().Add(time.Millisecond)
	require.NoError(t, w.Wait(t.Context(), nil, deadline))
	require.False(t, c.Now().Before(deadline))
}

func TestManualMovesOnlyWhenTold(t *testing.T) {
	start := time.Unix(1000, 0)
	m := clock.NewManual(start)
	require.Equal(t, start, m.Now())
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(t.Context(), m, time.Second) }()
	require.NoError(t, m.AwaitWaiters(t.Context(), 1))
	m.Advance(999 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("woke before its deadline")
	case <-time.After(20 * time.Millisecond):
	}
	m.Advance(time.Millisecond)
	require.NoError(t, <-done)
	require.Equal(t, start.Add(time.Second), m.Now())
	m.Set(start) // never backwards
	require.Equal(t, start.Add(time.Second), m.Now())
	require.Equal(t, time.Second, clock.Since(m, start))

	// An event ends a wait whose deadline never comes.
	ev := make(chan struct{}, 1)
	ev <- struct{}{}
	w := m.NewWaiter()
	require.NoError(t, w.Wait(t.Context(), ev, m.Now().Add(time.Hour)))
}

// drain takes ev's token if it holds one, and says whether it did.
func drain(ev chan struct{}) bool {
	select {
	case <-ev:
		return true
	default:
		return false
	}
}
