package local_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
)

func lender(t *testing.T, c comm.Comm) comm.Lender {
	l, ok := c.(comm.Lender)
	if !ok || !l.LendsBytes() {
		t.Fatalf("%T does not lend bytes", c)
	}
	if comm.PropsOf(c).Vectored == nil { // the conformance case PointToPointParts needs it
		t.Fatalf("%T has no vectored I/O", c)
	}
	return l
}

func notDone(q comm.Request, what string) error {
	if _, done, _ := q.Test(); done {
		return fmt.Errorf("%s is done before the loan was released", what)
	}
	return nil
}

func waitDone(ctx context.Context, q comm.Request) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := q.Wait(ctx)
	return err
}

// TestLend: parts travel without a copy to a loan and are copied in order
// into a plain receive; a lending send completes only at Release; checked
// mode forwards the capability.
func TestLend(t *testing.T) {
	for _, checked := range []bool{false, true} {
		t.Run(fmt.Sprintf("checked=%v", checked), func(t *testing.T) {
			a, b := []byte("head"), []byte("-tail")
			err := local.Run(context.Background(), 2, local.Config{Checked: checked, Timeout: 5 * time.Second}, func(ctx context.Context, c comm.Comm) error {
				l := lender(t, c)
				if c.Rank() == 0 {
					s1, err := l.IsendParts([][]byte{a, b}, 1, 1) // to a loan
					if err != nil {
						return err
					}
					s2, err := l.IsendParts([][]byte{a, b}, 1, 2) // to a plain receive
					if err != nil {
						return err
					}
					s3, err := c.Isend([]byte("plain"), 1, 3) // plain send to a loan
					if err != nil {
						return err
					}
					for _, q := range []comm.Request{s1, s2, s3} {
						if err := waitDone(ctx, q); err != nil {
							return err
						}
					}
					return nil
				}
				q1, err := l.IrecvLoan(0, 1)
				if err != nil {
					return err
				}
				if err := waitDone(ctx, q1); err != nil {
					return err
				}
				p := q1.Parts()
				if len(p) != 2 || unsafe.SliceData(p[0]) != unsafe.SliceData(a) || string(p[1]) != "-tail" {
					return fmt.Errorf("loan parts %q: want the sender's two slices", p)
				}
				buf := make([]byte, 16)
				q2, err := c.Irecv(buf, 0, 2)
				if err != nil {
					return err
				}
				st, err := q2.Wait(ctx)
				if err != nil || string(buf[:st.Len]) != "head-tail" {
					return fmt.Errorf("plain receive of parts: %q, %v", buf[:st.Len], err)
				}
				q3, err := l.IrecvLoan(0, 3)
				if err != nil {
					return err
				}
				if err := waitDone(ctx, q3); err != nil {
					return err
				}
				if p := q3.Parts(); len(p) != 1 || string(p[0]) != "plain" {
					return fmt.Errorf("loan of a plain send: %q", p)
				}
				q1.Release()
				q1.Release() // twice is allowed
				if err := q3.Cancel(); !errors.Is(err, comm.ErrNotCancelled) {
					return fmt.Errorf("cancel of a matched loan: %v, want ErrNotCancelled", err)
				}
				if p := q3.Parts(); len(p) != 1 {
					return fmt.Errorf("a matched loan lost its parts to Cancel: %q", p)
				}
				q3.Release()
				if q1.Parts() != nil {
					return fmt.Errorf("parts still lent after Release")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLendingSendWaitsForRelease: the sender's request is not done while
// the receiver holds the loan, and an unmatched loan cancels cleanly.
func TestLendingSendWaitsForRelease(t *testing.T) {
	err := local.Run(context.Background(), 2, local.Config{Timeout: 5 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		l := lender(t, c)
		if c.Rank() == 1 {
			q, err := l.IrecvLoan(0, 9) // nothing is sent on tag 9
			if err != nil {
				return err
			}
			if err := q.Cancel(); err != nil {
				return fmt.Errorf("cancel of an unmatched loan: %v", err)
			}
			q, err = l.IrecvLoan(0, 1)
			if err != nil {
				return err
			}
			if err := waitDone(ctx, q); err != nil {
				return err
			}
			// Rank 0 tests its send between the two barriers.
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			q.Release()
			return nil
		}
		s, err := l.IsendParts([][]byte{[]byte("x")}, 1, 1)
		if err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := notDone(s, "the lending send"); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		return waitDone(ctx, s)
	})
	if err != nil {
		t.Fatal(err)
	}
}
