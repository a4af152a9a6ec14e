package transceiver_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rankrun/rankrun/gpu"
	"github.com/rankrun/rankrun/transceiver"
)

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// prefill allocates and fills a CTX rank's blocks for req.
func prefill(r *rank, req transceiver.Request) error {
	if _, err := r.pool.TryAllocate(req.ID, r.tr.Shard().BlocksFor(req.Tokens)); err != nil {
		return err
	}
	transceiver.Prefill(r.pool, r.tr.Shard(), req.ID)
	return nil
}

// drain runs status checks (at_least 0) until want requests were reaped on
// this rank's group, returning what was reaped. The loop condition is an
// agreed value, so every rank of the group leaves it together.
func drain(ctx context.Context, r *rank, want int) ([]transceiver.Reaped, error) {
	var all []transceiver.Reaped
	for len(all) < want {
		if ctx.Err() != nil {
			return all, ctx.Err()
		}
		var res transceiver.Result
		var err error
		if r.role == transceiver.Context {
			res, err = r.tr.CheckContextTransferStatus(ctx, 0)
		} else {
			res, err = r.tr.CheckGenTransferStatus(ctx, 0)
		}
		if err != nil {
			return all, err
		}
		all = append(all, res.Reaped...)
		if len(res.Reaped) == 0 {
			// Nothing agreed yet: wait for a completion event (bounded).
			wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			select {
			case <-r.tr.Notify():
			case <-wctx.Done():
			}
			cancel()
		}
	}
	return all, nil
}

func requests(n int) []transceiver.Request {
	var out []transceiver.Request
	for i := range n {
		out = append(out, transceiver.Request{ID: gpu.RequestID(100 + i), Tokens: 1 + i*13})
	}
	return out
}

func TestTransferMovesEveryByte(t *testing.T) {
	for _, tc := range []struct{ ctx, gen string }{
		{"tp=1", "tp=4"},
		{"tp=4", "tp=1"},
		{"tp=2,pp=2", "tp=4"},
		{"tp=2", "tp=2,pp=2"},
		{"tp=1", "tp=8"}, // more GEN ranks than heads... 8 heads: one each
	} {
		t.Run(tc.ctx+"->"+tc.gen, func(t *testing.T) {
			reqs := requests(12)
			runRanks(t, setupOpts{ctx: tc.ctx, gen: tc.gen}, func(ctx context.Context, r *rank) error {
				for _, q := range reqs {
					var err error
					if r.role == transceiver.Generation {
						err = r.tr.StartReceive(q)
					} else if err = prefill(r, q); err == nil {
						err = r.tr.StartSend(q)
					}
					if err != nil {
						return err
					}
				}
				reaped, err := drain(ctx, r, len(reqs))
				if err != nil {
					return err
				}
				var verified int64
				for _, x := range reaped {
					if x.State != transceiver.StateTransferred {
						return errorf("%s rank %d: request %d ended %s: %s", r.role, r.groups.Rank, x.ID, x.State, x.Reason)
					}
					verified += x.Verified
					if r.role == transceiver.Generation {
						if err := r.pool.Release(x.ID); err != nil {
							return err
						}
					}
				}
				st := r.tr.Stats()
				if r.role == transceiver.Generation {
					if verified == 0 || verified != st.BytesReceived || st.BytesVerified != st.BytesReceived {
						return errorf("gen rank %d: verified %d of %d received bytes", r.groups.Rank, st.BytesVerified, st.BytesReceived)
					}
				}
				return nil
			})
		})
	}
}

func TestPollSeed000(t *testing.T) {
	one := setupOpts{ctx: "tp=1", gen: "tp=1", slice: 2 * time.Second, genPoll: 2 * time.Second}

	t.Run("EmptySessionsReturnAtOnce", func(t *testing.T) {
		runRanks(t, one, func(ctx context.Context, r *rank) error {
			if r.role != transceiver.Context {
				return nil
			}
			before := r.world.n.Load()
			start := time.Now()
			res, err := r.tr.CheckContextTransferStatus(ctx, 1)
			if err != nil {
				return err
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				return errorf("empty poll took %v with a 2 s slice", d)
			}
			if !res.Skipped || res.Collectives != 0 || r.world.n.Load() != before {
				return errorf("empty CTX check entered collectives: %+v", res)
			}
			return nil
		})
	})

	t.Run("UnclampedReplaySleepsTheSlice", func(t *testing.T) {
		o := one
		o.slice = 300 * time.Millisecond
		o.replays.UnclampedPoll = true
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			if r.role != transceiver.Context {
				return nil
			}
			start := time.Now()
			if _, err := r.tr.CheckContextTransferStatus(ctx, 1); err != nil {
				return err
			}
			if d := time.Since(start); d < 250*time.Millisecond {
				return errorf("unclamped replay returned after %v, want the whole 300 ms slice", d)
			}
			return nil
		})
	})

	// The GEN side starts receiving only after a delay, so the CTX session
	// is in flight when the poll starts and completes through the pump.
	inFlight := func(delay time.Duration, wantMin, wantMax time.Duration, atLeast int, nreq int, o setupOpts) func(t *testing.T) {
		return func(t *testing.T) {
			reqs := requests(nreq)
			runRanks(t, o, func(ctx context.Context, r *rank) error {
				if r.role == transceiver.Generation {
					timer := time.NewTimer(delay) // the injected delay of the peer
					defer timer.Stop()
					select {
					case <-timer.C:
					case <-ctx.Done():
						return ctx.Err()
					}
					for _, q := range reqs {
						if err := r.tr.StartReceive(q); err != nil {
							return err
						}
						if err := r.tr.ReceiveSync(ctx, q.ID); err != nil {
							return err
						}
					}
					reaped, err := drain(ctx, r, len(reqs))
					for _, x := range reaped {
						_ = r.pool.Release(x.ID)
					}
					return err
				}
				for _, q := range reqs {
					if err := prefill(r, q); err != nil {
						return err
					}
					if err := r.tr.StartSend(q); err != nil {
						return err
					}
				}
				before := r.world.n.Load()
				start := time.Now()
				res, err := r.tr.CheckContextTransferStatus(ctx, atLeast)
				if err != nil {
					return err
				}
				d := time.Since(start)
				if d < wantMin || d > wantMax {
					return errorf("poll took %v, want between %v and %v", d, wantMin, wantMax)
				}
				if r.world.n.Load() != before {
					return errorf("a single-rank CTX check entered %d collectives", r.world.n.Load()-before)
				}
				got := len(res.Reaped)
				rest, err := drain(ctx, r, len(reqs)-got)
				_ = rest
				return err
			})
		}
	}
	t.Run("InFlightSessionIsAwaited", inFlight(150*time.Millisecond, 100*time.Millisecond, 1900*time.Millisecond, 1, 1, one))
	t.Run("TargetAboveSessionCountWaitsOnlyForWhatCanComplete", inFlight(100*time.Millisecond, 50*time.Millisecond, 1900*time.Millisecond, 5, 2, one))
	slow := one
	slow.slice = 200 * time.Millisecond
	t.Run("NeverCompletingIsReleasedAtTheDeadline", inFlight(800*time.Millisecond, 180*time.Millisecond, 700*time.Millisecond, 1, 1, slow))

	t.Run("FailedSessionCounts", func(t *testing.T) {
		o := one
		o.faults = func(role transceiver.Role, rank int) *transceiver.Faults {
			return &transceiver.Faults{CorruptFragment: map[gpu.RequestID]bool{100: true}}
		}
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			q := requests(1)[0]
			if r.role == transceiver.Generation {
				if err := r.tr.StartReceive(q); err != nil {
					return err
				}
				reaped, err := drain(ctx, r, 1)
				if err != nil {
					return err
				}
				if reaped[0].State != transceiver.StateFailed {
					return errorf("gen: corrupted request ended %s", reaped[0].State)
				}
				return nil
			}
			if err := prefill(r, q); err != nil {
				return err
			}
			if err := r.tr.StartSend(q); err != nil {
				return err
			}
			start := time.Now()
			res, err := r.tr.CheckContextTransferStatus(ctx, 1)
			if err != nil {
				return err
			}
			if d := time.Since(start); d > 1500*time.Millisecond {
				return errorf("a failed session did not end the poll (%v)", d)
			}
			if len(res.Reaped) != 1 || res.Reaped[0].State != transceiver.StateFailed {
				return errorf("ctx: reaped %+v, want the request failed", res.Reaped)
			}
			return nil
		})
	})
}

func TestBadInput(t *testing.T) {
	runRanks(t, setupOpts{ctx: "tp=1", gen: "tp=2", blocks: 8}, func(ctx context.Context, r *rank) error {
		q := transceiver.Request{ID: 7, Tokens: 16}
		if r.role == transceiver.Generation {
			if err := r.tr.StartReceive(q); err != nil {
				return err
			}
			if err := r.tr.StartReceive(q); !errors.Is(err, transceiver.ErrDuplicate) {
				return errorf("duplicate StartReceive: %v", err)
			}
			big := transceiver.Request{ID: 8, Tokens: 10000}
			if err := r.tr.StartReceive(big); !errors.Is(err, transceiver.ErrNoSpace) {
				return errorf("oversized StartReceive: %v", err)
			}
			reaped, err := drain(ctx, r, 1)
			if err != nil {
				return err
			}
			return r.pool.Release(reaped[0].ID)
		}
		if err := r.tr.StartSend(q); !errors.Is(err, transceiver.ErrUnknown) {
			return errorf("StartSend without blocks: %v", err)
		}
		if err := prefill(r, q); err != nil {
			return err
		}
		if err := r.tr.StartSend(q); err != nil {
			return err
		}
		if err := r.tr.StartSend(q); !errors.Is(err, transceiver.ErrDuplicate) {
			return errorf("duplicate StartSend: %v", err)
		}
		_, err := drain(ctx, r, 1)
		return err
	})
}
