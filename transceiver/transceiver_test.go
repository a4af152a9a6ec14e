package transceiver_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// prefill allocates and fills a CTX rank's blocks for req.
func prefill(r *rank, req transceiver.Request) error {
	if _, err := r.pool.TryAllocate(req.ID, r.tr.Shard().BlocksFor(req.Tokens)); err != nil {
		return err
	}
	r.tr.Prefill(req.ID)
	return nil
}

// startRecv allocates a GEN rank's blocks for req and opens its receive
// session (the caller owns the blocks; the transceiver leases them).
func startRecv(r *rank, req transceiver.Request) error {
	if n := r.tr.Shard().BlocksFor(req.Tokens); n > 0 {
		if _, err := r.pool.TryAllocate(req.ID, n); err != nil {
			return err
		}
	}
	if err := r.tr.StartReceive(req); err != nil {
		_ = r.pool.Release(req.ID)
		return err
	}
	return nil
}

// release frees the blocks of reaped requests, as the executor does once
// the group agreed on their outcome.
func release(r *rank, reaped []transceiver.Reaped) error {
	for _, x := range reaped {
		if len(r.pool.Blocks(x.ID)) == 0 {
			continue // under CP a short request may hold no block here
		}
		if err := r.pool.Release(x.ID); err != nil {
			return fmt.Errorf("%s rank %d: release %s: %w", r.role, r.groups.Rank, x.ID, err)
		}
	}
	return nil
}

// drain runs status checks (at_least 0) until want requests were reaped on
// this rank's group, returning what was reaped. The loop condition is an
// agreed value, so every rank of the group leaves it together.
func drain(ctx context.Context, r *rank, want int) ([]transceiver.Reaped, error) {
	return drainWith(ctx, r, want, nil)
}

// heldBytesOK checks, independently of the transceiver's own verification,
// that a GEN rank's blocks of every completed request hold the KV pattern.
func heldBytesOK(r *rank, reaped []transceiver.Reaped) error {
	if r.role != topology.Generation {
		return nil
	}
	sh := r.tr.Shard()
	for _, x := range reaped {
		if x.Status != request.Completed {
			continue
		}
		for j, b := range r.pool.Blocks(x.ID) {
			blk := j*sh.CP + sh.CPIndex
			if l, kv, h, tok, ok := transceiver.VerifyBlock(r.pool.Block(b), sh, uint64(x.ID), blk, sh.LayerLo, sh.LayerHi, sh.HeadLo, sh.HeadHi); !ok {
				return errorf("gen rank %d: request %d block %d: layer %d %v head %d token %d does not hold the pattern", r.groups.Rank, x.ID, blk, l, kv, h, tok)
			}
		}
	}
	return nil
}

// drainWith is drain with check called on every batch of reaped requests
// before their blocks are released.
func drainWith(ctx context.Context, r *rank, want int, check func(*rank, []transceiver.Reaped) error) ([]transceiver.Reaped, error) {
	var all []transceiver.Reaped
	for len(all) < want {
		if ctx.Err() != nil {
			return all, ctx.Err()
		}
		var res transceiver.Result
		var err error
		if r.role == topology.Context {
			res, err = r.tr.CheckContextTransferStatus(ctx, 0)
		} else {
			res, err = r.tr.CheckGenTransferStatus(ctx, 0)
		}
		if err != nil {
			return all, err
		}
		if check != nil {
			if err := check(r, res.Reaped); err != nil {
				return all, err
			}
		}
		if err := release(r, res.Reaped); err != nil {
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

// start opens request q's session on this rank: GEN allocates its blocks
// and posts the receive, CTX prefills its blocks and sends.
func start(r *rank, q transceiver.Request) error {
	if r.role == topology.Generation {
		return startRecv(r, q)
	}
	if err := prefill(r, q); err != nil {
		return err
	}
	return r.tr.StartSend(q)
}

func requests(n int) []transceiver.Request {
	var out []transceiver.Request
	for i := range n {
		out = append(out, transceiver.Request{ID: request.ID(100 + i), Tokens: 1 + i*13})
	}
	return out
}

// TestTransferMovesEveryByte: every byte lands where it belongs (checked
// on the GEN blocks by the test itself) whether the bytes are lent or
// packed, and each verify mode counts what it verified.
func TestTransferMovesEveryByte(t *testing.T) {
	type layouts struct{ ctx, gen string }
	all := []layouts{
		{"tp=1", "tp=4"},
		{"tp=4", "tp=1"},
		{"tp=2,pp=2", "tp=4"},
		{"tp=2", "tp=2,pp=2"},
		{"tp=1", "tp=8"}, // more GEN ranks than heads... 8 heads: one each
	}
	for _, path := range []string{"", "vector", "pack"} {
		for _, v := range []transceiver.Verify{transceiver.VerifyFull, transceiver.VerifyChecksum, transceiver.VerifyOff} {
			cases := all
			if path != "" || v != transceiver.VerifyFull {
				cases = all[:3]
			}
			for _, tc := range cases {
				t.Run(fmt.Sprintf("path=%s/verify=%s/%s->%s", path, v, tc.ctx, tc.gen), func(t *testing.T) {
					moveEveryByte(t, setupOpts{ctx: tc.ctx, gen: tc.gen, path: path, verify: v})
				})
			}
		}
	}
}

func moveEveryByte(t *testing.T, o setupOpts) {
	reqs := requests(12)
	runRanks(t, o, func(ctx context.Context, r *rank) error {
		for _, q := range reqs {
			if err := start(r, q); err != nil {
				return err
			}
		}
		reaped, err := drainWith(ctx, r, len(reqs), heldBytesOK)
		if err != nil {
			return err
		}
		var verified int64
		for _, x := range reaped {
			if x.Status != request.Completed {
				return errorf("%s rank %d: request %d ended %s: %s", r.role, r.groups.Rank, x.ID, x.Status, x.Reason)
			}
			verified += x.Verified
		}
		st := r.tr.Stats()
		if r.role == topology.Generation {
			want := st.BytesReceived
			if o.verify == transceiver.VerifyOff {
				want = 0
			}
			if st.BytesReceived == 0 || verified != want || st.BytesVerified != want {
				return errorf("gen rank %d, verify %s: verified %d (sessions say %d) of %d received bytes, want %d",
					r.groups.Rank, o.verify, st.BytesVerified, verified, st.BytesReceived, want)
			}
		}
		return nil
	})
}

// The seven cases of seed 000's bounded-poll tests, on a manual clock: a
// frozen clock proves a poll ended on an event (a wait on a deadline would
// never end, and the test would fail at its bound), and an advanced one
// gives exact poll times.
// checkBound bounds one status check of TestPollSeed000 in real time.
const checkBound = 5 * time.Second

func TestPollSeed000(t *testing.T) {
	const slice = 2 * time.Second
	frozen := func(ctxL, genL string) (setupOpts, *clock.Manual) {
		m := clock.NewManual(time.Unix(1_000_000, 0))
		return setupOpts{ctx: ctxL, gen: genL, slice: slice, genPoll: slice, clock: m, bound: 20 * time.Second}, m
	}
	// check runs one status check under its own bound: on a frozen clock
	// a check that waits for an event that never comes ends only there,
	// and may still return a plausible result (the consensus completes
	// once every rank is in it), so reaching the bound is the failure.
	check := func(ctx context.Context, r *rank, atLeast int) (transceiver.Result, int64, error) {
		before := r.world.n.Load()
		cctx, cancel := context.WithTimeout(ctx, checkBound)
		defer cancel()
		res, err := r.tr.CheckContextTransferStatus(cctx, atLeast)
		n := r.world.n.Load() - before
		if cctx.Err() != nil && ctx.Err() == nil {
			return res, n, errorf("the status check (at least %d) ran into its %v bound on a frozen clock: it waited for sessions that cannot end (%+v, %v)", atLeast, checkBound, res, err)
		}
		if err == nil {
			err = release(r, res.Reaped)
		}
		return res, n, err
	}
	// receive runs a GEN rank's side of reqs to the end.
	receive := func(ctx context.Context, r *rank, reqs []transceiver.Request) error {
		for _, q := range reqs {
			if err := startRecv(r, q); err != nil {
				return err
			}
		}
		_, err := drain(ctx, r, len(reqs))
		return err
	}

	// An empty session table with wait_num 1 returns at once (the seed's
	// regression scenario), on a CTX that never sent: the consensus is
	// skipped on every rank of the TP group, and no collective is entered.
	t.Run("EmptySessionsNeverSentReturnAtOnce", func(t *testing.T) {
		o, _ := frozen("tp=2", "tp=1")
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			if r.role != topology.Context {
				return nil
			}
			res, n, err := check(ctx, r, 1)
			if err != nil {
				return err
			}
			if !res.Skipped || res.Collectives != 0 || n != 0 || res.PollWait != 0 {
				return errorf("never-sent CTX check: %+v, %d collectives counted", res, n)
			}
			return nil
		})
	})

	// The seed's state exactly: this CTX has sent, everything was reaped,
	// the table is empty. The poll returns at once; the consensus runs
	// (the ever-sent flag is sticky) and enters exactly its one ready-id
	// allgather over the TP group (nothing agreed: no outcome phase).
	t.Run("EmptySessionsAfterSendingReturnAtOnce", func(t *testing.T) {
		o, _ := frozen("tp=2", "tp=1")
		q := requests(1)
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			if r.role == topology.Generation {
				return receive(ctx, r, q)
			}
			if err := start(r, q[0]); err != nil {
				return err
			}
			if _, err := drain(ctx, r, 1); err != nil {
				return err
			}
			if r.tr.Sessions() != 0 || !r.tr.EverSent() {
				return errorf("want an empty table on a rank that sent: %d sessions, ever sent %t", r.tr.Sessions(), r.tr.EverSent())
			}
			res, n, err := check(ctx, r, 1)
			if err != nil {
				return err
			}
			if res.Skipped || res.Collectives != 1 || n != 1 || res.PollWait != 0 {
				return errorf("empty table after sending: %+v, %d collectives counted (want 1, no wait)", res, n)
			}
			return nil
		})
	})

	// The unclamped replay waits out the whole slice on an empty table.
	t.Run("UnclampedReplaySleepsTheSlice", func(t *testing.T) {
		o, m := frozen("tp=1", "tp=1")
		o.replays.UnclampedPoll = true
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			if r.role == topology.Generation {
				if err := m.AwaitWaiters(ctx, 1); err != nil {
					return err
				}
				m.Advance(slice)
				return nil
			}
			res, _, err := check(ctx, r, 1)
			if err != nil {
				return err
			}
			if res.PollWait != slice {
				return errorf("unclamped replay waited %v, want the whole %v slice", res.PollWait, slice)
			}
			return nil
		})
	})

	// An in-flight session is still awaited, and the poll wakes on its
	// completion (the clock is frozen: only the event can end it).
	t.Run("InFlightSessionIsAwaitedAndWakesOnTheEvent", func(t *testing.T) {
		o, m := frozen("tp=1", "tp=1")
		q := requests(1)
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			if r.role == topology.Generation {
				// Start receiving only once the CTX poll is waiting.
				if err := m.AwaitWaiters(ctx, 1); err != nil {
					return err
				}
				return receive(ctx, r, q)
			}
			if err := start(r, q[0]); err != nil {
				return err
			}
			res, _, err := check(ctx, r, 1)
			if err != nil {
				return err
			}
			if len(res.Reaped) != 1 || res.Reaped[0].Status != request.Completed || res.PollWait != 0 {
				return errorf("in-flight poll: %+v", res)
			}
			return nil
		})
	})

	// wait_num above the session count waits only for what can complete.
	t.Run("TargetAboveSessionCountWaitsOnlyForWhatCanComplete", func(t *testing.T) {
		o, m := frozen("tp=1", "tp=1")
		q := requests(2)
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			if r.role == topology.Generation {
				if err := m.AwaitWaiters(ctx, 1); err != nil {
					return err
				}
				return receive(ctx, r, q)
			}
			for _, x := range q {
				if err := start(r, x); err != nil {
					return err
				}
			}
			res, _, err := check(ctx, r, 5)
			if err != nil {
				return err
			}
			rest, err := drain(ctx, r, 2-len(res.Reaped))
			if err != nil {
				return err
			}
			if len(res.Reaped)+len(rest) != 2 {
				return errorf("reaped %d + %d of 2", len(res.Reaped), len(rest))
			}
			return nil
		})
	})

	// A never-completing session is released at the deadline: the poll
	// waits exactly the slice.
	t.Run("NeverCompletingIsReleasedAtTheDeadline", func(t *testing.T) {
		o, m := frozen("tp=1", "tp=1")
		q := requests(1)
		polled := make(chan struct{})
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			if r.role == topology.Generation {
				if err := m.AwaitWaiters(ctx, 1); err != nil {
					return err
				}
				m.Advance(slice)
				select { // the GEN side starts only after the poll gave up
				case <-polled:
				case <-ctx.Done():
					return ctx.Err()
				}
				return receive(ctx, r, q)
			}
			if err := start(r, q[0]); err != nil {
				return err
			}
			res, _, err := check(ctx, r, 1)
			close(polled)
			if err != nil {
				return err
			}
			if len(res.Reaped) != 0 || res.PollWait != slice {
				return errorf("poll of a never-completing session: reaped %d, waited %v (want 0, exactly %v)", len(res.Reaped), res.PollWait, slice)
			}
			_, err = drain(ctx, r, 1)
			return err
		})
	})

	// A failed session satisfies the exit condition.
	t.Run("FailedSessionCounts", func(t *testing.T) {
		o, _ := frozen("tp=1", "tp=1")
		o.faults = func(role topology.Role, rank int) *transceiver.Faults {
			return &transceiver.Faults{CorruptFragment: map[request.ID]transceiver.CorruptAt{100: {}}}
		}
		q := requests(1)
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			if r.role == topology.Generation {
				if err := startRecv(r, q[0]); err != nil {
					return err
				}
				reaped, err := drain(ctx, r, 1)
				if err != nil {
					return err
				}
				if reaped[0].Status != request.Failed {
					return errorf("gen: corrupted request ended %s", reaped[0].Status)
				}
				return nil
			}
			if err := start(r, q[0]); err != nil {
				return err
			}
			res, _, err := check(ctx, r, 1)
			if err != nil {
				return err
			}
			if len(res.Reaped) != 1 || res.Reaped[0].Status != request.Failed {
				return errorf("ctx: reaped %+v, want the request failed", res.Reaped)
			}
			return nil
		})
	})

	// An already-completed session satisfies wait_num 1 while a peer
	// session is still in flight (its GEN side has not started).
	t.Run("CompletedSessionSatisfiesWaitNumDespiteInFlightPeer", func(t *testing.T) {
		o, _ := frozen("tp=1", "tp=1")
		q := requests(2)
		polled := make(chan struct{})
		runRanks(t, o, func(ctx context.Context, r *rank) error {
			if r.role == topology.Generation {
				if err := startRecv(r, q[0]); err != nil {
					return err
				}
				if err := r.tr.ReceiveSync(ctx, q[0].ID); err != nil {
					return err
				}
				select { // the second request only after the CTX poll
				case <-polled:
				case <-ctx.Done():
					return ctx.Err()
				}
				if err := startRecv(r, q[1]); err != nil {
					return err
				}
				_, err := drain(ctx, r, 2)
				return err
			}
			for _, x := range q {
				if err := start(r, x); err != nil {
					return err
				}
			}
			// Wait (on events) until the first send is over here.
			for r.tr.Pump(); r.tr.TerminalHeld() == 0; r.tr.Pump() {
				if err := r.tr.WaitEvent(ctx, o.clock.Now().Add(time.Hour)); err != nil {
					return err
				}
			}
			res, _, err := check(ctx, r, 1)
			close(polled)
			if err != nil {
				return err
			}
			if len(res.Reaped) != 1 || res.Reaped[0].ID != q[0].ID || r.tr.Sessions() != 1 {
				return errorf("reaped %+v with %d sessions left, want request %d alone and 1 left", res.Reaped, r.tr.Sessions(), q[0].ID)
			}
			_, err = drain(ctx, r, 1)
			return err
		})
	})
}

func TestBadInput(t *testing.T) {
	runRanks(t, setupOpts{ctx: "tp=1", gen: "tp=2", blocks: 8}, func(ctx context.Context, r *rank) error {
		q := transceiver.Request{ID: 7, Tokens: 16}
		if r.role == topology.Generation {
			if err := startRecv(r, q); err != nil {
				return err
			}
			if err := r.tr.StartReceive(q); !errors.Is(err, transceiver.ErrDuplicate) {
				return errorf("duplicate StartReceive: %v", err)
			}
			// Blocks are the caller's to allocate: a receive without them
			// is refused.
			if err := r.tr.StartReceive(transceiver.Request{ID: 8, Tokens: 16}); !errors.Is(err, transceiver.ErrUnknown) {
				return errorf("StartReceive without blocks: %v", err)
			}
			_, err := drain(ctx, r, 1)
			return err
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

// TestStartSendPostsWhatItCan: when the GEN rank's request info has
// arrived before StartSend (here: sent before a barrier), the fragment
// leaves in StartSend itself, not in the next status check's pump; on
// every path the bytes move.
func TestStartSendPostsWhatItCan(t *testing.T) {
	for _, path := range []string{"", "vector", "pack"} {
		t.Run("path="+path, func(t *testing.T) {
			q := transceiver.Request{ID: 7, Tokens: 40}
			runRanks(t, setupOpts{ctx: "tp=1", gen: "tp=2", path: path}, func(ctx context.Context, r *rank) error {
				if r.role == topology.Generation {
					if err := startRecv(r, q); err != nil {
						return err
					}
				} else if err := prefill(r, q); err != nil {
					return err
				}
				if err := r.world.Barrier(ctx); err != nil {
					return err
				}
				if r.role == topology.Context {
					if err := r.tr.StartSend(q); err != nil {
						return err
					}
					if st := r.tr.Stats(); st.BytesSent == 0 {
						return errorf("ctx: StartSend posted nothing although both GEN ranks' request info had arrived")
					}
				}
				reaped, err := drainWith(ctx, r, 1, heldBytesOK)
				if err != nil {
					return err
				}
				if reaped[0].Status != request.Completed {
					return errorf("%s rank %d: request ended %s: %s", r.role, r.groups.Rank, reaped[0].Status, reaped[0].Reason)
				}
				return nil
			})
		})
	}
}
