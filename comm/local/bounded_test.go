package local_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
)

// With BoundWaits, a Wait past the bound returns ErrWaitTimeout and
// leaves the receive in flight, its flight record open: the peer's late
// send still lands in it, and a second Wait completes it (and closes the
// record). The waiting rank is the first and the last of three.
func TestBoundedWaitLeavesTheRequestInFlight(t *testing.T) {
	for _, waiter := range []int{0, 2} {
		peer := (waiter + 1) % 3
		err := local.Run(context.Background(), 3, local.Config{Checked: true, BoundWaits: true, Timeout: 100 * time.Millisecond},
			func(ctx context.Context, c comm.Comm) error {
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
			})
		if err != nil {
			t.Fatalf("waiter rank %d: %v", waiter, err)
		}
	}
}

// openRecv reports whether rank's flight recorder holds a receive not yet
// ended.
func openRecv(ctx context.Context, c comm.Comm, rank int) (bool, error) {
	ins, ok := comm.Unwrap(c).(comm.Inspector)
	if !ok {
		return false, errors.New("the backend does not inspect")
	}
	for _, p := range ins.InspectPeers(ctx) {
		if p.Rank != rank {
			continue
		}
		for _, r := range p.Records {
			if r.Kind == comm.KindRecv && r.InProgress() {
				return true, nil
			}
		}
	}
	return false, nil
}
