package kvpool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rankrun/rankrun/request"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newPool(t testing.TB, blocks, bytes int) *Pool {
	t.Helper()
	p, err := NewPool(PoolConfig{Blocks: blocks, BlockBytes: bytes, Name: "test"})
	require.NoError(t, err)
	return p
}

func checkInv(t testing.TB, p *Pool) {
	t.Helper()
	require.NoError(t, p.CheckInvariants())
}

func TestPoolConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  PoolConfig
		want string
	}{
		{PoolConfig{Blocks: 0, BlockBytes: 1}, "kvpool: invalid argument: PoolConfig.Blocks must be positive (got 0)"},
		{PoolConfig{Blocks: 1 << 31, BlockBytes: 1}, "PoolConfig.Blocks must be at most 2147483647"},
		{PoolConfig{Blocks: 1, BlockBytes: -1}, "PoolConfig.BlockBytes must be positive (got -1)"},
		{PoolConfig{Blocks: 1 << 20, BlockBytes: 1 << 21}, "PoolConfig.Blocks*BlockBytes must be at most 1099511627776 bytes"},
	} {
		err := tc.cfg.Validate()
		assert.ErrorIs(t, err, ErrInvalid)
		assert.ErrorContains(t, err, tc.want)
		_, err = NewPool(tc.cfg)
		assert.ErrorIs(t, err, ErrInvalid)
	}
	assert.NoError(t, PoolConfig{Blocks: 4, BlockBytes: 8}.Validate())
}

func TestPrintable(t *testing.T) {
	assert.Equal(t, "req-7", request.ID(7).String())
	assert.Equal(t, "block-3", BlockID(3).String())
	assert.Equal(t, "lease-2", LeaseID(2).String())
	p, err := NewPool(PoolConfig{Blocks: 1, BlockBytes: 1})
	require.NoError(t, err)
	assert.Equal(t, "kv", p.Name())
}

func TestPoolBasics(t *testing.T) {
	p := newPool(t, 8, 16)
	assert.Equal(t, 8, p.Total())
	assert.Equal(t, 16, p.BlockBytes())

	a, err := p.TryAllocate(1, 3)
	require.NoError(t, err)
	assert.Equal(t, []BlockID{0, 1, 2}, a)
	assert.Equal(t, a, p.Blocks(1))
	a[0] = 99 // the caller's copy
	assert.Equal(t, []BlockID{0, 1, 2}, p.Blocks(1))
	assert.Nil(t, p.Blocks(2))

	// Blocks are real, distinct, and capped.
	for _, id := range p.Blocks(1) {
		b := p.Block(id)
		require.Len(t, b, 16)
		require.Equal(t, 16, cap(b))
		for i := range b {
			b[i] = byte(id)
		}
	}
	assert.Equal(t, byte(1), p.Block(1)[15])
	assert.Equal(t, byte(2), p.Block(2)[0])
	assert.Panics(t, func() { p.Block(8) })
	assert.Panics(t, func() { p.Block(-1) })

	b, err := p.Allocate(context.Background(), 2, 5)
	require.NoError(t, err)
	assert.Len(t, b, 5)
	checkInv(t, p)

	_, err = p.TryAllocate(3, 1)
	assert.ErrorIs(t, err, ErrPoolFull)
	assert.EqualError(t, err, `kvpool: pool "test": try-allocate 1 blocks for req-3: kvpool: pool full (0 free, 0 waiters ahead)`)

	_, err = p.TryAllocate(1, 1)
	assert.ErrorIs(t, err, ErrDuplicate)
	assert.ErrorContains(t, err, "req-1")
	_, err = p.Allocate(context.Background(), 1, 1)
	assert.ErrorIs(t, err, ErrDuplicate)

	_, err = p.TryAllocate(4, 9)
	assert.ErrorIs(t, err, ErrTooLarge)
	_, err = p.Allocate(context.Background(), 4, 9) // never waits forever
	assert.ErrorIs(t, err, ErrTooLarge)
	assert.EqualError(t, err, `kvpool: pool "test": allocate 9 blocks for req-4: kvpool: request larger than the pool (8 blocks in all)`)
	_, err = p.TryAllocate(4, 0)
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = p.Allocate(context.Background(), 4, -1)
	assert.ErrorIs(t, err, ErrInvalid)

	st := p.Stats()
	assert.Equal(t, Stats{Total: 8, Used: 8, Free: 0, PeakUsed: 8, Requests: 2}, st)
	assert.InDelta(t, 1.0, st.Utilisation(), 1e-9)

	require.NoError(t, p.Release(1))
	err = p.Release(1)
	assert.ErrorIs(t, err, ErrNotAllocated)
	assert.EqualError(t, err, `kvpool: pool "test": release req-1: kvpool: request not allocated (released twice, or never allocated)`)
	assert.ErrorIs(t, p.Release(42), ErrNotAllocated)
	require.NoError(t, p.Release(2))
	st = p.Stats()
	assert.Equal(t, 0, st.Used)
	assert.Equal(t, 8, st.Free)
	assert.Equal(t, 8, st.PeakUsed)
	assert.InDelta(t, 1.0, st.PeakUtilisation(), 1e-9)
	checkInv(t, p)
}

func TestLeases(t *testing.T) {
	p := newPool(t, 8, 4)
	_, err := p.Lease(1)
	assert.ErrorIs(t, err, ErrNotAllocated)

	_, err = p.TryAllocate(1, 2)
	require.NoError(t, err)
	l1, err := p.Lease(1)
	require.NoError(t, err)
	l2, err := p.Lease(1)
	require.NoError(t, err)
	assert.NotEqual(t, l1, l2)
	st := p.Stats()
	assert.Equal(t, 2, st.Pinned)
	assert.Equal(t, 2, st.Leases)
	assert.InDelta(t, 0.25, st.PinnedFraction(), 1e-9)
	checkInv(t, p)

	err = p.Release(1)
	assert.ErrorIs(t, err, ErrPinned)
	assert.EqualError(t, err, `kvpool: pool "test": release req-1: kvpool: request blocks pinned by open leases (2 open leases; end them first)`)

	require.NoError(t, p.EndLease(l1))
	assert.ErrorIs(t, p.Release(1), ErrPinned)
	assert.Equal(t, 2, p.Stats().Pinned)
	err = p.EndLease(l1)
	assert.ErrorIs(t, err, ErrUnknownLease)
	assert.EqualError(t, err, `kvpool: pool "test": end lease-1: kvpool: unknown lease (ended twice, or never granted)`)
	require.NoError(t, p.EndLease(l2))
	assert.Equal(t, 0, p.Stats().Pinned)
	assert.Equal(t, 2, p.Stats().PeakPinned)
	checkInv(t, p)
	require.NoError(t, p.Release(1))
	checkInv(t, p)
}

func TestAllocateWaitsForRelease(t *testing.T) {
	p := newPool(t, 4, 1)
	_, err := p.TryAllocate(1, 3)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		_, err := p.Allocate(context.Background(), 2, 2)
		got <- err
	}()
	waitFor(t, func() bool { return p.Stats().Waiters == 1 })
	checkInv(t, p)
	// A waiter is queued: TryAllocate does not jump it even though 1 is free.
	_, err = p.TryAllocate(3, 1)
	assert.ErrorIs(t, err, ErrPoolFull)
	assert.ErrorContains(t, err, "1 free, 1 waiters ahead")
	// A second Allocate for the waiting request is a duplicate.
	_, err = p.TryAllocate(2, 1)
	assert.ErrorIs(t, err, ErrDuplicate)
	assert.ErrorContains(t, p.Release(2), "its Allocate is still waiting")

	require.NoError(t, p.Release(1))
	require.NoError(t, <-got)
	assert.Len(t, p.Blocks(2), 2)
	checkInv(t, p)
}

func TestAllocateFIFO(t *testing.T) {
	p := newPool(t, 4, 1)
	_, err := p.TryAllocate(1, 3)
	require.NoError(t, err)
	done := map[request.ID]chan error{2: make(chan error, 1), 3: make(chan error, 1)}
	start := func(req request.ID, n int) {
		go func() {
			_, err := p.Allocate(context.Background(), req, n)
			done[req] <- err
		}()
	}
	start(2, 3) // does not fit: 1 free
	waitFor(t, func() bool { return p.Stats().Waiters == 1 })
	start(3, 1) // would fit, but queues behind req-2
	waitFor(t, func() bool { return p.Stats().Waiters == 2 })
	assert.Equal(t, 1, p.Stats().Free)
	checkInv(t, p)

	require.NoError(t, p.Release(1)) // 4 free: req-2 takes 3, req-3 then fits too
	require.NoError(t, <-done[2])
	require.NoError(t, <-done[3])
	assert.Len(t, p.Blocks(2), 3)
	assert.Len(t, p.Blocks(3), 1)
	checkInv(t, p)

	// Head-of-line: req-4 (2 blocks) waits; req-5 (1 block) waits behind it;
	// releasing req-3 frees 1 block, which goes to nobody: req-4 is first.
	done[4], done[5] = make(chan error, 1), make(chan error, 1)
	start(4, 2)
	waitFor(t, func() bool { return p.Stats().Waiters == 1 })
	start(5, 1)
	waitFor(t, func() bool { return p.Stats().Waiters == 2 })
	require.NoError(t, p.Release(3))
	assert.Equal(t, 2, p.Stats().Waiters)
	assert.Nil(t, p.Blocks(5))
	checkInv(t, p)
	require.NoError(t, p.Release(2)) // 4 free: req-4 then req-5
	require.NoError(t, <-done[4])
	require.NoError(t, <-done[5])
	checkInv(t, p)
}

func TestAllocateCancelLeavesPoolUnchanged(t *testing.T) {
	p := newPool(t, 4, 1)
	_, err := p.TryAllocate(1, 3)
	require.NoError(t, err)
	before := p.Stats()

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := p.Allocate(ctx, 2, 2)
		got <- err
	}()
	waitFor(t, func() bool { return p.Stats().Waiters == 1 })
	cancel()
	err = <-got
	assert.ErrorIs(t, err, context.Canceled)
	assert.EqualError(t, err, `kvpool: pool "test": allocate 2 blocks for req-2: context canceled`)
	assert.Equal(t, before, p.Stats())
	assert.Nil(t, p.Blocks(2))
	checkInv(t, p)

	// Already-done context: fails even if the blocks are free.
	_, err = p.Allocate(ctx, 3, 1)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, before, p.Stats())

	// Deadline.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer dcancel()
	_, err = p.Allocate(dctx, 4, 2)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, before, p.Stats())
	checkInv(t, p)
}

// TestCancelHeadWakesSmallerWaiter: a big waiter at the head blocks a small
// one; when the big one gives up, the small one must be granted at once.
func TestCancelHeadWakesSmallerWaiter(t *testing.T) {
	p := newPool(t, 4, 1)
	_, err := p.TryAllocate(1, 3)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	bigDone := make(chan error, 1)
	go func() {
		_, err := p.Allocate(ctx, 2, 4)
		bigDone <- err
	}()
	waitFor(t, func() bool { return p.Stats().Waiters == 1 })
	smallDone := make(chan error, 1)
	go func() {
		_, err := p.Allocate(context.Background(), 3, 1)
		smallDone <- err
	}()
	waitFor(t, func() bool { return p.Stats().Waiters == 2 })
	cancel()
	assert.ErrorIs(t, <-bigDone, context.Canceled)
	require.NoError(t, <-smallDone)
	checkInv(t, p)
}

// waitFor waits on an observed condition with a deadline; the pool offers no
// event for "a waiter queued", so the test polls its Stats.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestConcurrentAllocateRelease(t *testing.T) {
	p := newPool(t, 64, 8)
	const workers, rounds = 16, 200
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < rounds; i++ {
				req := request.ID(w*rounds + i)
				n := 1 + r.IntN(20)
				var ids []BlockID
				var err error
				if r.IntN(3) == 0 {
					ids, err = p.TryAllocate(req, n)
					if errors.Is(err, ErrPoolFull) {
						continue
					}
				} else {
					ids, err = p.Allocate(ctx, req, n)
				}
				if !assert.NoError(t, err) {
					return
				}
				for _, id := range ids { // write and verify our bytes
					b := p.Block(id)
					for j := range b {
						b[j] = byte(req)
					}
				}
				lease, err := p.Lease(req)
				assert.NoError(t, err)
				for _, id := range ids {
					for _, x := range p.Block(id) {
						if x != byte(req) {
							t.Errorf("%v of %v overwritten", id, req)
							return
						}
					}
				}
				assert.NoError(t, p.EndLease(lease))
				assert.NoError(t, p.Release(req))
			}
		}()
	}
	// A checker runs alongside.
	stop := make(chan struct{})
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		for {
			select {
			case <-stop:
				return
			default:
				if err := p.CheckInvariants(); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-checked
	st := p.Stats()
	assert.Equal(t, 0, st.Used)
	assert.Equal(t, 0, st.Leases)
	assert.Equal(t, 0, st.Waiters)
	checkInv(t, p)
}

// refPool is the deliberately dumb model FuzzPoolOps checks the pool against.
type refPool struct {
	total  int
	held   map[request.ID]int // blocks
	leases map[LeaseID]request.ID
}

func (r *refPool) used() int {
	n := 0
	for _, b := range r.held {
		n += b
	}
	return n
}

func (r *refPool) pinned() int {
	pinnedReq := map[request.ID]bool{}
	for _, req := range r.leases {
		pinnedReq[req] = true
	}
	n := 0
	for req := range pinnedReq {
		n += r.held[req]
	}
	return n
}

// FuzzPoolOps drives a pool with a random sequence of operations encoded in
// the input (two bytes per step) and checks the invariants and a reference
// model after each one.
func FuzzPoolOps(f *testing.F) {
	f.Add([]byte{0, 3, 1, 0, 2, 0, 3, 0, 2, 0})
	f.Add([]byte{0, 0xff, 0, 0x13, 0x10, 0x20, 5, 1, 4, 4, 2, 2, 2, 0, 3, 1})
	f.Add([]byte("allocate, lease, release, end lease, release again"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const total = 16
		p := newPool(t, total, 2)
		ref := &refPool{total: total, held: map[request.ID]int{}, leases: map[LeaseID]request.ID{}}
		var open []LeaseID
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%6, ops[i+1]
			req := request.ID(arg % 8)
			step := fmt.Sprintf("step %d op %d arg %d", i/2, op, arg)
			switch op {
			case 0, 1: // TryAllocate, or Allocate with a background context when it fits
				n := int(arg>>3) + 1 // 1..32
				_, dup := ref.held[req]
				var err error
				if op == 1 && !dup && n <= total-ref.used() {
					_, err = p.Allocate(context.Background(), req, n)
				} else {
					_, err = p.TryAllocate(req, n)
				}
				switch {
				case n > total:
					require.ErrorIs(t, err, ErrTooLarge, step)
				case dup:
					require.ErrorIs(t, err, ErrDuplicate, step)
				case n > total-ref.used():
					require.ErrorIs(t, err, ErrPoolFull, step)
				default:
					require.NoError(t, err, step)
					ref.held[req] = n
				}
			case 2: // Release
				err := p.Release(req)
				pinned := false
				for _, r := range ref.leases {
					pinned = pinned || r == req
				}
				_, held := ref.held[req]
				switch {
				case !held:
					require.ErrorIs(t, err, ErrNotAllocated, step)
				case pinned:
					require.ErrorIs(t, err, ErrPinned, step)
				default:
					require.NoError(t, err, step)
					delete(ref.held, req)
				}
			case 3: // Lease
				id, err := p.Lease(req)
				if _, held := ref.held[req]; !held {
					require.ErrorIs(t, err, ErrNotAllocated, step)
				} else {
					require.NoError(t, err, step)
					ref.leases[id] = req
					open = append(open, id)
				}
			case 4: // EndLease of an open lease, or of a bogus/ended one
				if len(open) > 0 && arg%4 != 0 {
					k := int(arg) % len(open)
					id := open[k]
					open = append(open[:k], open[k+1:]...)
					require.NoError(t, p.EndLease(id), step)
					delete(ref.leases, id)
				} else {
					require.ErrorIs(t, p.EndLease(LeaseID(1000+int(arg))), ErrUnknownLease, step)
				}
			case 5: // Allocate with a context that is already done: no change
				before := p.Stats()
				_, err := p.Allocate(cancelled, req, int(arg%total)+1)
				require.Error(t, err, step)
				require.Equal(t, before, p.Stats(), step)
			}
			require.NoError(t, p.CheckInvariants(), step)
			st := p.Stats()
			require.Equal(t, ref.used(), st.Used, step)
			require.Equal(t, ref.pinned(), st.Pinned, step)
			require.Equal(t, len(ref.leases), st.Leases, step)
			require.Equal(t, len(ref.held), st.Requests, step)
			require.Equal(t, total-st.Used, st.Free, step)
			for req, n := range ref.held {
				require.Len(t, p.Blocks(req), n, step)
			}
		}
	})
}

func TestCheckInvariantsCatchesCorruption(t *testing.T) {
	p := newPool(t, 4, 1)
	_, err := p.TryAllocate(1, 2)
	require.NoError(t, err)
	checkInv(t, p)
	// Corrupt the bookkeeping by hand: each must be caught.
	p.free = append(p.free, p.free[0])
	assert.ErrorIs(t, p.CheckInvariants(), ErrInvariant)
	p.free = p.free[:len(p.free)-1]
	checkInv(t, p)
	p.state[0] = statePinned
	assert.ErrorContains(t, p.CheckInvariants(), "block-0 of req-1 is in state 2")
	p.state[0] = stateUsed
	p.used++
	assert.ErrorContains(t, p.CheckInvariants(), "counters")
	p.used--
	p.leases[99] = 7
	assert.ErrorContains(t, p.CheckInvariants(), "open lease on req-7")
	delete(p.leases, 99)
	checkInv(t, p)
}

func BenchmarkAllocateRelease32(b *testing.B) {
	p := newPool(b, 1024, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := request.ID(i)
		if _, err := p.TryAllocate(req, 32); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllocateCtxRelease32(b *testing.B) {
	p := newPool(b, 1024, 64)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := request.ID(i)
		if _, err := p.Allocate(ctx, req, 32); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLeaseEndLease(b *testing.B) {
	p := newPool(b, 1024, 64)
	if _, err := p.TryAllocate(1, 32); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		id, err := p.Lease(1)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.EndLease(id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReferenceFreeList32 is the reference for the pool benchmarks:
// the least a block pool must do, a mutex-protected free list popping and
// pushing 32 block ids, with no ownership, lease or state tracking.
func BenchmarkReferenceFreeList32(b *testing.B) {
	var mu sync.Mutex
	free := make([]BlockID, 1024)
	for i := range free {
		free[i] = BlockID(i)
	}
	got := make([]BlockID, 0, 32)
	b.ReportAllocs()
	for b.Loop() {
		mu.Lock()
		got = append(got[:0], free[len(free)-32:]...)
		free = free[:len(free)-32]
		mu.Unlock()
		mu.Lock()
		free = append(free, got...)
		mu.Unlock()
	}
}
