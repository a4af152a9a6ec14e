package comm

import (
	"context"
	"fmt"
)

// ReduceOp is the element-wise operation of AllreduceInt64.
type ReduceOp uint8

// The reductions every backend supports.
const (
	Sum ReduceOp = iota + 1
	Min
	Max
	BitOr
	BitAnd
)

func (op ReduceOp) String() string {
	switch op {
	case Sum:
		return "sum"
	case Min:
		return "min"
	case Max:
		return "max"
	case BitOr:
		return "bor"
	case BitAnd:
		return "band"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(op))
}

// Valid reports whether op is one of the defined reductions.
func (op ReduceOp) Valid() bool { return op >= Sum && op <= BitAnd }

// Apply folds b into a element-wise (a[i] = a[i] op b[i]). Backends that
// reduce in Go use it so that every backend computes the same thing.
func (op ReduceOp) Apply(a, b []int64) {
	switch op {
	case Sum:
		for i := range a {
			a[i] += b[i]
		}
	case Min:
		for i := range a {
			a[i] = min(a[i], b[i])
		}
	case Max:
		for i := range a {
			a[i] = max(a[i], b[i])
		}
	case BitOr:
		for i := range a {
			a[i] |= b[i]
		}
	case BitAnd:
		for i := range a {
			a[i] &= b[i]
		}
	}
}

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
// error, after which the request is still in flight).
type Request interface {
	// Test reports without blocking whether the request has completed.
	Test() (st Status, done bool, err error)
	// Wait blocks until the request completes or ctx ends. When ctx ends
	// first, Wait returns ctx's error wrapped and the request is unchanged.
	Wait(ctx context.Context) (Status, error)
	// Cancel withdraws a receive that has not matched yet; after Cancel
	// returns nil the buffer is free. Cancelling a send, or a receive that
	// already matched, returns an error wrapping ErrNotCancelled. A
	// receive that had matched may still be arriving (over MPI, Cancel
	// waits a bounded time for it): then Test says whether it is done,
	// and until it is its buffer stays in use.
	Cancel() error
}

// Lender is an optional capability of a backend whose ranks share one
// address space (comm/local): a message may be sent as parts, straight from
// where its bytes lie, and received as a loan of the sender's bytes, so that
// the receiver copies them where they belong on its own goroutine, in one
// pass with whatever it checks, instead of the backend copying them into a
// receive buffer first. This is what a one-sided read of registered memory
// (RDMA, NVLink) gives a real KV transfer. Either side may also use the
// plain calls: a plain Irecv matching IsendParts gets the parts copied one
// after the other, and a loan matching a plain Isend lends its one buffer.
// A wrapper (checked mode) implements the methods whatever it wraps, and
// says through LendsBytes whether the backend underneath does.
type Lender interface {
	// LendsBytes reports whether IsendParts and IrecvLoan are available.
	LendsBytes() bool
	// IsendParts sends the concatenation of parts. The parts belong to the
	// request until it is done, which is when the receiver has released
	// them (a plain receive releases them at once).
	IsendParts(parts [][]byte, dest, tag int) (Request, error)
	// IrecvLoan posts a receive that, once Test reports done, lends the
	// message's bytes (Loan.Parts) until Release.
	IrecvLoan(src, tag int) (Loan, error)
}

// Vectored is an optional capability of a backend that sends a message
// from several buffers and receives one into several buffers without a
// packing copy (MPI: one hindexed datatype over the buffers). The message
// is the concatenation of the parts; a receive fills its parts in order
// (a shorter message leaves the tail as it was, a longer one is
// ErrTruncated); Status.Len counts the bytes received. The parts belong to
// the request until it is done. Each side may use the plain calls instead:
// the bytes on the wire are the same. A wrapper implements the methods
// whatever it wraps and says through VectorIO whether the backend does.
type Vectored interface {
	VectorIO() bool
	IsendParts(parts [][]byte, dest, tag int) (Request, error)
	IrecvParts(parts [][]byte, src, tag int) (Request, error)
}

// VectoredOf returns the outermost Vectored of c and the communicators it
// wraps, or nil where the backend has no vectored I/O.
func VectoredOf(c Comm) Vectored {
	for {
		if v, ok := c.(Vectored); ok {
			if v.VectorIO() {
				return v
			}
			return nil
		}
		w, ok := c.(Wrapper)
		if !ok {
			return nil
		}
		c = w.Unwrap()
	}
}

// Loan is a receive posted with IrecvLoan.
type Loan interface {
	Request
	// Parts returns the message, in order, once Test or Wait reported it
	// done; nil before. The slices are the sender's: read them, never
	// write, and not after Release.
	Parts() [][]byte
	// Release gives the bytes back; the sender's request completes. It may
	// be called more than once. Cancel on a loan that matched returns
	// ErrNotCancelled, as for any matched receive, and keeps the loan: the
	// receiver still releases it.
	Release()
}

// Gathered receives the result of AllgatherInt64s. Its buffers are reused
// between calls, so a steady-state allgather does not allocate.
type Gathered struct {
	Counts []int   // Counts[r] is how many values rank r contributed
	Flat   []int64 // every rank's values, rank 0 first
	offs   []int
}

// Of returns rank r's contribution (a view into Flat).
func (g *Gathered) Of(r int) []int64 {
	return g.Flat[g.offs[r] : g.offs[r]+g.Counts[r]]
}

// Reset sizes g for n ranks with the given counts (counts is copied) and
// returns Flat resized to the total, reusing capacity. Backends call it.
func (g *Gathered) Reset(counts []int) []int64 {
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
// normally drives them from one goroutine.
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

// CheckArgs validates the arguments shared by every backend's Isend/Irecv.
func CheckArgs(c Comm, op string, peer, tag int, wildcard bool) error {
	if wildcard && peer == AnySource {
	} else if peer < 0 || peer >= c.Size() {
		return fmt.Errorf("%w: %s: peer rank %d outside 0..%d", ErrBadArgument, op, peer, c.Size()-1)
	}
	if wildcard && tag == AnyTag {
		return nil
	}
	if tag < 0 || tag > MaxTag {
		return fmt.Errorf("%w: %s: tag %d outside 0..%d", ErrBadArgument, op, tag, MaxTag)
	}
	return nil
}
