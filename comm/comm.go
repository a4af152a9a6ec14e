package comm

import (
	"context"

	"github.com/rankrun/rankrun/comm/internal/typed"
)

// ReduceOp is the element-wise operation of a reduction (AllreduceInt64,
// and the typed Allreduce, Reduce and ReduceScatter, which add Prod and
// BitXor).
type ReduceOp = typed.ReduceOp

// The reductions: every backend supports each for int64s; for the typed
// collectives, Sum, Prod, Min and Max reduce every Element, the bitwise
// ones the integers only.
const (
	Sum    = typed.Sum
	Min    = typed.Min
	Max    = typed.Max
	BitOr  = typed.BitOr
	BitAnd = typed.BitAnd
	Prod   = typed.Prod
	BitXor = typed.BitXor
)

// Wildcards for Irecv.
const (
	AnySource = -1
	AnyTag    = -1
)

// MaxTag is the largest tag a message may carry (the smallest upper bound
// MPI guarantees, so programs stay portable between backends).
const MaxTag = 32767

// Status describes a completed point-to-point request.
type Status struct {
	Source int // rank of the sender within the communicator
	Tag    int
	Len    int // bytes delivered
}

// Request is a non-blocking point-to-point operation in flight.
//
// The buffer passed to Isend or Irecv belongs to the request until Test
// reports done or Wait returns (with or without error, except a context
// error or ErrWaitTimeout, after which the request is still in flight).
type Request interface {
	// Test reports without blocking whether the request has completed.
	Test() (st Status, done bool, err error)
	// Wait blocks until the request completes or ctx ends. When ctx ends
	// first, Wait returns ctx's error wrapped and the request is unchanged;
	// so too past the backend's bound on waits, where it has one
	// (*WaitTimeoutError).
	Wait(ctx context.Context) (Status, error)
	// Cancel withdraws a receive that has not matched yet; after Cancel
	// returns nil the buffer is free. Cancelling a send, or a receive that
	// already matched, returns an error wrapping ErrNotCancelled. A
	// receive that had matched may still be arriving (over MPI, Cancel
	// waits a bounded time for it): then Test says whether it is done,
	// and until it is its buffer stays in use.
	Cancel() error
}

// Gathered receives the result of AllgatherInt64s. Its buffers are reused
// between calls, so a steady-state allgather does not allocate.
type Gathered struct {
	Counts []int   // Counts[r] is how many values rank r contributed
	Flat   []int64 // every rank's values, rank 0 first
	offs   []int
	shared bool // the buffers are another Gathered's (Share): read only
	// readOnly: the caller only reads the result (checked mode's stamp
	// exchange), so a backend may share one among its ranks (Shareable).
	readOnly bool
	// agreed caches checked mode's verdict on the stamps of a shared
	// result, for every member that shares it (nil: not shared).
	agreed *stampVerdict
}

// stampVerdict is whether a shared gathered result's stamps agree, once
// one member has looked.
type stampVerdict struct{ known, agree bool }

// Of returns rank r's contribution (a view into Flat).
func (g *Gathered) Of(r int) []int64 {
	return g.Flat[g.offs[r] : g.offs[r]+g.Counts[r]]
}

// Shareable reports whether g's owner only reads what it gathers, so that
// a backend whose ranks share one process may hand it a result shared with
// the other ranks (Share) instead of a copy. Only this package's checked
// mode marks its own: a caller's Gathered always gets a copy of its own.
func (g *Gathered) Shareable() bool { return g.readOnly }

// Share makes g a view of from's result, for a g that is Shareable: a
// backend whose ranks share one process may hand every rank of a large
// group the one result instead of a copy each (the simulator does). g's
// next Reset gives it buffers of its own again. Backends call it.
func (g *Gathered) Share(from *Gathered) {
	if from.agreed == nil {
		from.agreed = &stampVerdict{}
	}
	g.Counts, g.Flat, g.offs, g.shared, g.agreed = from.Counts, from.Flat, from.offs, true, from.agreed
}

// unshare drops buffers g shares with another Gathered before g is
// written.
func (g *Gathered) unshare() {
	if g.shared {
		g.Counts, g.Flat, g.offs, g.shared, g.agreed = nil, nil, nil, false, nil
	}
}

// Reset sizes g for n ranks with the given counts (counts is copied) and
// returns Flat resized to the total, reusing capacity. Backends call it.
func (g *Gathered) Reset(counts []int) []int64 {
	g.unshare()
	n := len(counts)
	if cap(g.Counts) < n {
		g.Counts = make([]int, n)
		g.offs = make([]int, n)
	}
	g.Counts = g.Counts[:n]
	g.offs = g.offs[:n]
	total := 0
	for r, c := range counts {
		g.Counts[r] = c
		g.offs[r] = total
		total += c
	}
	if cap(g.Flat) < total {
		g.Flat = make([]int64, total, total+total/2)
	}
	g.Flat = g.Flat[:total]
	return g.Flat
}

// ResetFunc is Reset with counts read through a function, for backends that
// hold counts in another type (C ints).
func (g *Gathered) ResetFunc(n int, count func(r int) int) []int64 {
	g.unshare()
	if cap(g.Counts) < n {
		g.Counts = make([]int, n)
		g.offs = make([]int, n)
	}
	g.Counts = g.Counts[:n]
	g.offs = g.offs[:n]
	total := 0
	for r := range n {
		c := count(r)
		g.Counts[r] = c
		g.offs[r] = total
		total += c
	}
	if cap(g.Flat) < total {
		g.Flat = make([]int64, total, total+total/2)
	}
	g.Flat = g.Flat[:total]
	return g.Flat
}

// Comm is a communicator: a group of ranks. All methods are safe to call from
// several goroutines of one rank, but the collectives of one communicator
// must be called in the same order on every rank (the one rule), so a rank
// normally drives them from one goroutine. A rank that records guard values
// (Guard) must do so, and begin its operations on every communicator, from
// one goroutine: recording takes no lock (see flight.Recorder.Guard).
type Comm interface {
	// Rank is this rank's index in the group, 0 <= Rank < Size.
	Rank() int
	// Size is the number of ranks in the group.
	Size() int
	// Name identifies the group; it is the same on every member ("world",
	// "world/s3c1" for color 1 of the third collective on world).
	Name() string

	// Split is a collective: ranks that pass the same color form a new
	// communicator, ordered by key then by rank here. color must be >= 0.
	Split(ctx context.Context, color, key int) (Comm, error)
	// Barrier returns once every rank of the group has entered it.
	Barrier(ctx context.Context) error
	// AllreduceInt64 reduces in element-wise over the group into out. in and
	// out must have the same length on every rank; they may be the same slice.
	AllreduceInt64(ctx context.Context, op ReduceOp, in, out []int64) error
	// AllgatherInt64s gathers every rank's in (any length, zero included)
	// into out, on every rank.
	AllgatherInt64s(ctx context.Context, in []int64, out *Gathered) error
	// Bcast sends root's data to every rank. On root it returns data; on
	// the others it returns the received bytes in buf (grown when too small).
	Bcast(ctx context.Context, root int, data []byte) ([]byte, error)

	// Isend starts sending buf to rank dest with tag (0..MaxTag).
	Isend(buf []byte, dest, tag int) (Request, error)
	// Irecv starts receiving into buf from src (or AnySource) with tag (or
	// AnyTag). A longer message fails the request with ErrTruncated.
	Irecv(buf []byte, src, tag int) (Request, error)

	// Close releases the communicator; later calls return ErrClosed. Close
	// is idempotent.
	Close() error
}
