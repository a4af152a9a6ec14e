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
