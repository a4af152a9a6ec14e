package local_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/local"
)

// With BoundWaits, a Wait past the bound returns ErrWaitTimeout and
// leaves the receive in flight, its flight record open: the peer's late
// send still lands in it, and a second Wait completes it (and closes the
// record). The waiting rank is the first and the last of three.
func TestBoundedWaitLeavesTheRequestInFlight(t *testing.T) {
	firstAndLastOfThree(t, func(waiter, peer int) local.RankFunc {
		return func(ctx context.Context, c comm.Comm) error {
			switch c.Rank() {
			case waiter:
				buf := make([]byte, 4)
				q, err := c.Irecv(buf, peer, 5)
				if err != nil {
					return err
				}
				if _, err := q.Wait(ctx); !errors.Is(err, comm.ErrWaitTimeout) {
					return fmt.Errorf("first wait: %v, want ErrWaitTimeout", err)
				}
				if open, err := openRecv(ctx, c, waiter); err != nil || !open {
					return fmt.Errorf("after the timeout the receive's record is open: %v (%v)", open, err)
				}
				// Tell the peer to send now (it posted this receive first).
				if g, err := c.Isend([]byte{1}, peer, 6); err != nil {
					return err
				} else if _, err := g.Wait(ctx); err != nil {
					return err
				}
				if _, err := q.Wait(ctx); err != nil {
					return fmt.Errorf("second wait: %v", err)
				}
				if string(buf) != "late" {
					return fmt.Errorf("received %q, want the late send", buf)
				}
				if open, err := openRecv(ctx, c, waiter); err != nil || open {
					return fmt.Errorf("after it completed the receive's record is open: %v (%v)", open, err)
				}
				return nil
			case peer:
				// Polled, not waited on: a Wait here would meet the
				// same bound as the waiter's.
				g, err := c.Irecv(make([]byte, 1), waiter, 6)
				if err != nil {
					return err
				}
				for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
					if _, done, err := g.Test(); done || err != nil {
						if err != nil {
							return err
						}
						break
					}
					if time.Now().After(deadline) {
						return errors.New("the waiter never said go")
					}
				}
				q, err := c.Isend([]byte("late"), waiter, 5)
				if err != nil {
					return err
				}
				_, err = q.Wait(ctx)
				return err
			}
			return nil
		}
	})
}

// firstAndLastOfThree runs fn's ranks on a checked world of three whose
// waits are bounded (100 ms), with the rank under test first (0), then
// last (2); the other rank it names is the one after it.
func firstAndLastOfThree(t *testing.T, fn func(rank, next int) local.RankFunc) {
	t.Helper()
	for _, rank := range []int{0, 2} {
		err := local.Run(context.Background(), 3, local.Config{Checked: true, BoundWaits: true, Timeout: 100 * time.Millisecond}, fn(rank, (rank+1)%3))
		if err != nil {
			t.Fatalf("rank under test %d: %v", rank, err)
		}
	}
}

// openRecv reports whether rank's flight recorder holds a receive not yet
// ended.
func openRecv(ctx context.Context, c comm.Comm, rank int) (bool, error) {
	ins, ok := comm.PropsOf(c).Backend.(interface {
		InspectPeers(context.Context) []comm.PeerRecords
	})
	if !ok {
		return false, errors.New("the backend does not inspect")
	}
	for _, p := range ins.InspectPeers(ctx) {
		if p.Rank != rank {
			continue
		}
		for _, r := range p.Records {
			if r.Kind == flight.KindRecv && r.InProgress() {
				return true, nil
			}
		}
	}
	return false, nil
}

// A Sendrecv whose receive times out withdraws it before returning: a
// message the peer sends afterwards with that tag finds no receive (its
// own send times out) and never lands in the buffer Sendrecv returned. The
// waiting rank is the first and the last of three.
func TestSendrecvFreesItsReceiveOnTimeout(t *testing.T) {
	firstAndLastOfThree(t, func(waiter, peer int) local.RankFunc {
		return func(ctx context.Context, c comm.Comm) error {
			switch c.Rank() {
			case waiter:
				buf := make([]byte, 4)
				if _, err := comm.Sendrecv(ctx, c, []byte("ping"), peer, 1, buf, peer, 2); !errors.Is(err, comm.ErrWaitTimeout) {
					return fmt.Errorf("Sendrecv: %v, want ErrWaitTimeout", err)
				}
				if open, err := openRecv(ctx, c, waiter); err != nil || open {
					return fmt.Errorf("after Sendrecv returned its receive's record is open: %v (%v)", open, err)
				}
				if err := sendPolled(c, peer, 3, []byte{1}); err != nil { // go
					return err
				}
				done := make([]byte, 1) // the peer's late send has ended
				if err := recvPolled(c, peer, 4, done); err != nil {
					return err
				}
				if string(buf) != "\x00\x00\x00\x00" {
					return fmt.Errorf("the late send landed in the buffer Sendrecv returned: %q", buf)
				}
				return nil
			case peer:
				if err := recvPolled(c, waiter, 1, make([]byte, 4)); err != nil { // the ping
					return err
				}
				if err := recvPolled(c, waiter, 3, make([]byte, 1)); err != nil { // go
					return err
				}
				q, err := c.Isend([]byte("late"), waiter, 2)
				if err != nil {
					return err
				}
				if _, err := q.Wait(ctx); !errors.Is(err, comm.ErrWaitTimeout) {
					return fmt.Errorf("the late send: %v, want ErrWaitTimeout (no receive left to match)", err)
				}
				return sendPolled(c, waiter, 4, []byte{1})
			}
			return nil
		}
	})
}

// recvPolled and sendPolled complete a request by polling it (up to 10 s
// of wall time), not by a Wait that the bound under test would end.
func recvPolled(c comm.Comm, src, tag int, buf []byte) error {
	q, err := c.Irecv(buf, src, tag)
	if err != nil {
		return err
	}
	return poll(q, fmt.Sprintf("receive from rank %d tag %d", src, tag))
}

func sendPolled(c comm.Comm, dest, tag int, buf []byte) error {
	q, err := c.Isend(buf, dest, tag)
	if err != nil {
		return err
	}
	return poll(q, fmt.Sprintf("send to rank %d tag %d", dest, tag))
}

func poll(q comm.Request, what string) error {
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		if _, done, err := q.Test(); done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done within 10s", what)
		}
	}
}

// A Sendrecv that nothing matches returns at its receive's bound: it does
// not wait out a second bound on its send. On a manual clock, one advance
// by the bound ends it; a second wait on the clock would be the send's.
func TestSendrecvWaitsOneBound(t *testing.T) {
	const bound = time.Second
	m := clock.NewManual(time.Unix(0, 0))
	got := make(chan error, 1)
	go func() {
		got <- local.Run(context.Background(), 2, local.Config{Checked: true, BoundWaits: true, Timeout: bound, Clock: m},
			func(ctx context.Context, c comm.Comm) error {
				if c.Rank() == 1 {
					return nil // matches nothing
				}
				_, err := comm.Sendrecv(ctx, c, []byte("ping"), 1, 1, make([]byte, 4), 1, 2)
				if !errors.Is(err, comm.ErrWaitTimeout) {
					return fmt.Errorf("Sendrecv: %v, want ErrWaitTimeout", err)
				}
				return nil
			})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.AwaitWaiters(ctx, 1); err != nil {
		t.Fatalf("Sendrecv never waited on the clock: %v", err)
	}
	m.Advance(bound)
	again := make(chan error, 1)
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	go func() { again <- m.AwaitWaiters(actx, 1) }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-again:
		m.Advance(bound) // let it end
		<-got
		if err == nil {
			t.Fatal("past its receive's bound Sendrecv waited a second bound, on its send")
		}
		t.Fatalf("the run never ended: %v", err)
	}
	acancel()
	<-again
}

// A send whose receiver took it as a loan and holds it unreleased times
// out saying so (not "no peer matched"); once the loan is released a
// second Wait completes it. The sender is the first and the last of three.
func TestBoundedSendNamesAnUnreleasedLoan(t *testing.T) {
	firstAndLastOfThree(t, func(sender, holder int) local.RankFunc {
		return func(ctx context.Context, c comm.Comm) error {
			switch c.Rank() {
			case sender:
				q, err := c.Isend([]byte("kv"), holder, 5)
				if err != nil {
					return err
				}
				_, err = q.Wait(ctx)
				want := fmt.Sprintf("rank %d waited in a send to rank %d tag 5 that its receiver took as a loan and has not released", sender, holder)
				if !errors.Is(err, comm.ErrWaitTimeout) || !strings.Contains(err.Error(), want) {
					return fmt.Errorf("send to a loan held unreleased: %v, want %q", err, want)
				}
				if err := sendPolled(c, holder, 6, []byte{1}); err != nil { // release it now
					return err
				}
				_, err = q.Wait(ctx)
				return err
			case holder:
				l, err := c.(comm.Lender).IrecvLoan(sender, 5)
				if err != nil {
					return err
				}
				if err := poll(l, "the loan"); err != nil {
					return err
				}
				if err := recvPolled(c, sender, 6, make([]byte, 1)); err != nil {
					return err
				}
				l.Release()
			}
			return nil
		}
	})
}
