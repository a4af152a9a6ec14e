package kvpool

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/rankrun/rankrun/request"
)

// BlockID indexes a block of one pool: [0, Blocks).
type BlockID int32

func (b BlockID) String() string { return "block-" + strconv.FormatInt(int64(b), 10) }

// LeaseID names an open lease of one pool. Leases are never reused.
type LeaseID uint64

func (l LeaseID) String() string { return "lease-" + strconv.FormatUint(uint64(l), 10) }

// MaxPoolBytes bounds a pool's storage (1 TiB), far above any host here but
// low enough that Blocks*BlockBytes cannot overflow.
const MaxPoolBytes = 1 << 40

// MaxBlocks bounds a pool's blocks: block ids are int32 on the wire.
const MaxBlocks = math.MaxInt32

// PoolConfig configures a Pool.
type PoolConfig struct {
	Blocks     int    // number of blocks; 1 to math.MaxInt32
	BlockBytes int    // bytes per block; positive, Blocks*BlockBytes <= MaxPoolBytes
	Name       string // used in errors; "kv" when empty
	// Arena, when set, holds the pool's storage (outside the Go heap,
	// freed with the arena); nil: the Go heap.
	Arena *Arena
}

// Validate names the field and the rule that failed; errors wrap ErrInvalid.
func (c PoolConfig) Validate() error {
	switch {
	case c.Blocks <= 0:
		return fmt.Errorf("%w: PoolConfig.Blocks must be positive (got %d)", ErrInvalid, c.Blocks)
	case c.Blocks > MaxBlocks:
		return fmt.Errorf("%w: PoolConfig.Blocks must be at most %d (got %d)", ErrInvalid, MaxBlocks, c.Blocks)
	case c.BlockBytes <= 0:
		return fmt.Errorf("%w: PoolConfig.BlockBytes must be positive (got %d)", ErrInvalid, c.BlockBytes)
	case c.BlockBytes > MaxPoolBytes/c.Blocks:
		return fmt.Errorf("%w: PoolConfig.Blocks*BlockBytes must be at most %d bytes (got %d blocks of %d bytes)",
			ErrInvalid, int64(MaxPoolBytes), c.Blocks, c.BlockBytes)
	}
	return nil
}

type blockState uint8

const (
	stateFree blockState = iota
	stateUsed
	statePinned
)

type holding struct {
	blocks []BlockID
	leases int
}

type waiter struct {
	req    request.ID
	n      int
	ready  chan struct{} // closed once blocks is set
	blocks []BlockID     // the caller's copy, set when granted
}

// Pool is one rank's KV block pool. It is safe for concurrent use. Create it
// with NewPool.
type Pool struct {
	name       string
	blockBytes int
	data       []byte

	mu      sync.Mutex
	free    []BlockID // stack of free blocks
	state   []blockState
	owner   []request.ID // valid where state != stateFree
	held    map[request.ID]*holding
	spare   []*holding // recycled holdings, to keep Allocate/Release allocation-light
	leases  map[LeaseID]request.ID
	lastID  LeaseID
	queue   []*waiter // FIFO
	waiting map[request.ID]*waiter

	used, pinned, peakUsed, peakPinned int
}

// NewPool allocates the pool's storage (Blocks*BlockBytes bytes, zeroed).
func NewPool(cfg PoolConfig) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = "kv"
	}
	p := &Pool{
		name:       cfg.Name,
		blockBytes: cfg.BlockBytes,
		data:       cfg.Arena.alloc(cfg.Blocks * cfg.BlockBytes),
		free:       make([]BlockID, cfg.Blocks),
		state:      make([]blockState, cfg.Blocks),
		owner:      make([]request.ID, cfg.Blocks),
		held:       map[request.ID]*holding{},
		leases:     map[LeaseID]request.ID{},
		waiting:    map[request.ID]*waiter{},
	}
	// Pop from the end: hand out low block ids first.
	for i := range p.free {
		p.free[i] = BlockID(cfg.Blocks - 1 - i)
	}
	return p, nil
}

// Name is the pool's name as used in errors.
func (p *Pool) Name() string { return p.name }

// Total is the number of blocks.
func (p *Pool) Total() int { return len(p.state) }

// BlockBytes is the size of one block.
func (p *Pool) BlockBytes() int { return p.blockBytes }

func (p *Pool) checkN(op string, req request.ID, n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: pool %q: %s %d blocks for %v: n must be positive", ErrInvalid, p.name, op, n, req)
	}
	if n > len(p.state) {
		return fmt.Errorf("kvpool: pool %q: %s %d blocks for %v: %w (%d blocks in all)", p.name, op, n, req, ErrTooLarge, len(p.state))
	}
	return nil
}

func (p *Pool) dupLocked(op string, req request.ID) error {
	if h, ok := p.held[req]; ok {
		return fmt.Errorf("kvpool: pool %q: %s for %v: %w (it holds %d blocks; release them first)", p.name, op, req, ErrDuplicate, len(h.blocks))
	}
	if _, ok := p.waiting[req]; ok {
		return fmt.Errorf("kvpool: pool %q: %s for %v: %w (another Allocate for it is waiting)", p.name, op, req, ErrDuplicate)
	}
	return nil
}

// Allocate gives req n blocks, waiting until they are free or ctx ends.
// Waiters are served in FIFO order, so a large request is not starved by
// smaller ones. On ctx's end it returns an error wrapping ctx.Err() and the
// pool is as if Allocate had not been called. n larger than the pool fails at
// once with ErrTooLarge; a request that holds or awaits blocks fails with
// ErrDuplicate. The returned slice is the caller's.
func (p *Pool) Allocate(ctx context.Context, req request.ID, n int) ([]BlockID, error) {
	if err := p.checkN("allocate", req, n); err != nil {
		return nil, err
	}
	done := ctx.Done()
	p.mu.Lock()
	if err := p.dupLocked("allocate", req); err != nil {
		p.mu.Unlock()
		return nil, err
	}
	select {
	case <-done:
		p.mu.Unlock()
		return nil, fmt.Errorf("kvpool: pool %q: allocate %d blocks for %v: %w", p.name, n, req, ctx.Err())
	default:
	}
	if len(p.queue) == 0 && len(p.free) >= n {
		ids := slices.Clone(p.grantLocked(req, n))
		p.mu.Unlock()
		return ids, nil
	}
	w := &waiter{req: req, n: n, ready: make(chan struct{})}
	p.queue = append(p.queue, w)
	p.waiting[req] = w
	p.mu.Unlock()

	select {
	case <-w.ready:
		return w.blocks, nil
	case <-done:
	}
	p.mu.Lock()
	select {
	case <-w.ready:
		// Granted while ctx ended: give the blocks back.
		p.releaseLocked(req)
	default:
		i := slices.Index(p.queue, w)
		p.queue = slices.Delete(p.queue, i, i+1)
		delete(p.waiting, req)
		if i == 0 {
			// The head of the queue left; those behind may fit now.
			p.notifyLocked()
		}
	}
	p.mu.Unlock()
	return nil, fmt.Errorf("kvpool: pool %q: allocate %d blocks for %v: %w", p.name, n, req, ctx.Err())
}

// TryAllocate gives req n blocks if they are free now and nobody waits ahead;
// otherwise it fails at once with ErrPoolFull and changes nothing.
func (p *Pool) TryAllocate(req request.ID, n int) ([]BlockID, error) {
	if err := p.checkN("try-allocate", req, n); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.dupLocked("try-allocate", req); err != nil {
		return nil, err
	}
	if len(p.queue) > 0 || len(p.free) < n {
		return nil, fmt.Errorf("kvpool: pool %q: try-allocate %d blocks for %v: %w (%d free, %d waiters ahead)",
			p.name, n, req, ErrPoolFull, len(p.free), len(p.queue))
	}
	return slices.Clone(p.grantLocked(req, n)), nil
}

// grantLocked moves n free blocks to req; the caller has checked they fit.
// It returns the holding's own slice.
func (p *Pool) grantLocked(req request.ID, n int) []BlockID {
	var h *holding
	if k := len(p.spare); k > 0 {
		h, p.spare = p.spare[k-1], p.spare[:k-1]
	} else {
		h = &holding{}
	}
	cut := len(p.free) - n
	h.blocks = append(h.blocks[:0], p.free[cut:]...)
	slices.Reverse(h.blocks) // lowest id first when the pool is fresh
	p.free = p.free[:cut]
	for _, b := range h.blocks {
		p.state[b] = stateUsed
		p.owner[b] = req
	}
	p.held[req] = h
	p.used += n
	p.peakUsed = max(p.peakUsed, p.used)
	return h.blocks
}

// notifyLocked grants waiters in FIFO order while the head fits.
func (p *Pool) notifyLocked() {
	for len(p.queue) > 0 {
		w := p.queue[0]
		if len(p.free) < w.n {
			return
		}
		w.blocks = slices.Clone(p.grantLocked(w.req, w.n))
		p.queue[0] = nil
		p.queue = p.queue[1:]
		delete(p.waiting, w.req)
		close(w.ready)
	}
}

// Release frees req's blocks and wakes waiters. It fails with ErrPinned
// while a lease on req is open, and with ErrNotAllocated if req holds no
// blocks (released twice, never allocated, or still waiting).
func (p *Pool) Release(req request.ID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.held[req]
	if !ok {
		why := "released twice, or never allocated"
		if _, w := p.waiting[req]; w {
			why = "its Allocate is still waiting"
		}
		return fmt.Errorf("kvpool: pool %q: release %v: %w (%s)", p.name, req, ErrNotAllocated, why)
	}
	if h.leases > 0 {
		return fmt.Errorf("kvpool: pool %q: release %v: %w (%d open leases; end them first)", p.name, req, ErrPinned, h.leases)
	}
	p.releaseLocked(req)
	return nil
}

// releaseLocked frees an unpinned holding and wakes waiters.
func (p *Pool) releaseLocked(req request.ID) {
	h := p.held[req]
	for _, b := range h.blocks {
		p.state[b] = stateFree
	}
	p.free = append(p.free, h.blocks...)
	p.used -= len(h.blocks)
	delete(p.held, req)
	h.blocks = h.blocks[:0]
	p.spare = append(p.spare, h)
	p.notifyLocked()
}

// Lease pins req's blocks until EndLease; Release is refused meanwhile.
// Several leases may pin one request. It fails with ErrNotAllocated if req
// holds no blocks.
func (p *Pool) Lease(req request.ID) (LeaseID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.held[req]
	if !ok {
		return 0, fmt.Errorf("kvpool: pool %q: lease %v: %w", p.name, req, ErrNotAllocated)
	}
	p.lastID++
	id := p.lastID
	p.leases[id] = req
	h.leases++
	if h.leases == 1 {
		for _, b := range h.blocks {
			p.state[b] = statePinned
		}
		p.pinned += len(h.blocks)
		p.peakPinned = max(p.peakPinned, p.pinned)
	}
	return id, nil
}

// EndLease closes a lease; the request's blocks are unpinned when its last
// lease ends. Ending a lease twice fails with ErrUnknownLease.
func (p *Pool) EndLease(id LeaseID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	req, ok := p.leases[id]
	if !ok {
		return fmt.Errorf("kvpool: pool %q: end %v: %w (ended twice, or never granted)", p.name, id, ErrUnknownLease)
	}
	delete(p.leases, id)
	h := p.held[req]
	h.leases--
	if h.leases == 0 {
		for _, b := range h.blocks {
			p.state[b] = stateUsed
		}
		p.pinned -= len(h.blocks)
	}
	return nil
}

// Block returns the storage of block id (BlockBytes long, capacity capped).
// It does not lock: the caller must hold id's allocation. It panics if id is
// out of range.
func (p *Pool) Block(id BlockID) []byte {
	if id < 0 || int(id) >= len(p.state) {
		panic(fmt.Sprintf("kvpool: pool %q: %v out of range [0, %d)", p.name, id, len(p.state)))
	}
	off := int(id) * p.blockBytes
	return p.data[off : off+p.blockBytes : off+p.blockBytes]
}

// Blocks returns a copy of req's blocks in allocation order, or nil.
func (p *Pool) Blocks(req request.ID) []BlockID {
	return p.AppendBlocks(nil, req)
}

// AppendBlocks appends req's blocks to dst (no allocation when dst has room).
func (p *Pool) AppendBlocks(dst []BlockID, req request.ID) []BlockID {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.held[req]; ok {
		dst = append(dst, h.blocks...)
	}
	return dst
}

// Stats is a snapshot of a pool's counters, in blocks.
type Stats struct {
	Total      int // blocks in the pool
	Used       int // allocated, pinned or not
	Pinned     int // allocated and pinned by an open lease (a subset of Used)
	Free       int // Total - Used
	PeakUsed   int // highest Used since NewPool
	PeakPinned int // highest Pinned since NewPool
	Leases     int // open leases
	Requests   int // requests holding blocks
	Waiters    int // Allocate calls waiting
}

// Utilisation is Used/Total.
func (s Stats) Utilisation() float64 { return float64(s.Used) / float64(s.Total) }

// PinnedFraction is Pinned/Total.
func (s Stats) PinnedFraction() float64 { return float64(s.Pinned) / float64(s.Total) }

// PeakUtilisation is PeakUsed/Total.
func (s Stats) PeakUtilisation() float64 { return float64(s.PeakUsed) / float64(s.Total) }

// Stats returns a snapshot.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Total: len(p.state), Used: p.used, Pinned: p.pinned, Free: len(p.free),
		PeakUsed: p.peakUsed, PeakPinned: p.peakPinned, Leases: len(p.leases),
		Requests: len(p.held), Waiters: len(p.queue),
	}
}

// CheckInvariants verifies the bookkeeping: every block is in exactly one
// state (free, used, pinned) and owned consistently; the free list has no
// duplicates; counters match; no block is pinned without an open lease and
// no leased request is unpinned; no waiter that fits is left waiting.
// Errors wrap ErrInvariant.
func (p *Pool) CheckInvariants() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: pool %q: %s", ErrInvariant, p.name, fmt.Sprintf(format, args...))
	}
	seen := make([]int, len(p.state)) // how many places claim each block
	for _, b := range p.free {
		if b < 0 || int(b) >= len(p.state) {
			return bad("free list holds out-of-range %v", b)
		}
		seen[b]++
		if seen[b] > 1 {
			return bad("%v is on the free list twice", b)
		}
		if p.state[b] != stateFree {
			return bad("%v is on the free list in state %d", b, p.state[b])
		}
	}
	used, pinned, leases := 0, 0, map[request.ID]int{}
	for _, req := range p.leases {
		leases[req]++
	}
	for req, h := range p.held {
		if len(h.blocks) == 0 {
			return bad("%v holds no blocks", req)
		}
		if h.leases != leases[req] {
			return bad("%v counts %d leases, %d open", req, h.leases, leases[req])
		}
		want := stateUsed
		if h.leases > 0 {
			want = statePinned
			pinned += len(h.blocks)
		}
		for _, b := range h.blocks {
			seen[b]++
			if seen[b] > 1 {
				return bad("%v is claimed twice (second claim by %v)", b, req)
			}
			if p.state[b] != want || p.owner[b] != req {
				return bad("%v of %v is in state %d owned by %v; want state %d", b, req, p.state[b], p.owner[b], want)
			}
		}
		used += len(h.blocks)
		if _, w := p.waiting[req]; w {
			return bad("%v both holds blocks and waits", req)
		}
	}
	for req := range leases {
		if _, ok := p.held[req]; !ok {
			return bad("open lease on %v, which holds no blocks", req)
		}
	}
	for b, n := range seen {
		if n != 1 {
			return bad("block-%d is in %d places (state %d)", b, n, p.state[b])
		}
	}
	if used != p.used || pinned != p.pinned || used+len(p.free) != len(p.state) {
		return bad("counters used=%d pinned=%d free=%d; counted used=%d pinned=%d of %d",
			p.used, p.pinned, len(p.free), used, pinned, len(p.state))
	}
	if p.peakUsed < p.used || p.peakPinned < p.pinned {
		return bad("peaks below current values")
	}
	if len(p.queue) != len(p.waiting) {
		return bad("%d queued waiters, %d in the index", len(p.queue), len(p.waiting))
	}
	for _, w := range p.queue {
		if p.waiting[w.req] != w {
			return bad("queued waiter for %v is not indexed", w.req)
		}
	}
	if len(p.queue) > 0 && p.queue[0].n <= len(p.free) {
		return bad("waiter for %v (%d blocks) left waiting with %d free", p.queue[0].req, p.queue[0].n, len(p.free))
	}
	return nil
}

// Holding is what one request holds in a pool: its blocks and how many
// leases pin them.
type Holding struct {
	Request request.ID
	Blocks  int
	Leases  int
}

// Holdings lists every request holding blocks, by request id: what a
// failure dump shows of the pool.
func (p *Pool) Holdings() []Holding {
	p.mu.Lock()
	out := make([]Holding, 0, len(p.held))
	for id, h := range p.held {
		out = append(out, Holding{Request: id, Blocks: len(h.blocks), Leases: h.leases})
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b Holding) int { return cmp.Compare(a.Request, b.Request) })
	return out
}
