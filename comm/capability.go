package comm

import (
	"context"
	"time"
)

// The optional capabilities of a backend communicator, and how to find
// them under wrappers (checked mode, a test's counting layer): a caller
// asks for what it can use and falls back where the backend lacks it.

// inspector is an optional capability of a backend communicator. After a
// checked collective times out, the checked layer asks it for every rank's
// flight records to tell which ranks never arrived and what they did last.
// In-process this reads the peers' recorders; under MPI it asks the peers.
type inspector interface {
	InspectPeers(ctx context.Context) []PeerRecords
}

// wrapper is implemented by a communicator that wraps another (checked
// mode, a test's counting layer), so that the optional capabilities of the
// backend underneath (Notifier, inspector, boundedComm, ...) stay reachable.
type wrapper interface {
	Unwrap() Comm
}

// unwrap returns the backend communicator under any number of wrappers
// (c itself when it wraps nothing).
func unwrap(c Comm) Comm {
	for {
		w, ok := c.(wrapper)
		if !ok {
			return c
		}
		c = w.Unwrap()
	}
}

// isChecked reports whether c is in checked mode (under any wrappers).
func isChecked(c Comm) bool {
	for {
		if _, ok := c.(*checked); ok {
			return true
		}
		w, ok := c.(wrapper)
		if !ok {
			return false
		}
		c = w.Unwrap()
	}
}

// lenderOf returns the outermost Lender of c and the communicators it
// wraps (checked mode records what it forwards), or nil where the backend
// does not lend bytes.
func lenderOf(c Comm) Lender { return outermost(c, Lender.LendsBytes) }

// outermost walks c and the communicators it wraps to the first that
// implements capability T and returns it when on says the capability is
// there; the zero T otherwise. A wrapper that implements T decides for
// what it wraps (checked mode forwards, and records, what its backend has).
func outermost[T any](c Comm, on func(T) bool) T {
	var none T
	for {
		if t, ok := c.(T); ok {
			if on(t) {
				return t
			}
			return none
		}
		w, ok := c.(wrapper)
		if !ok {
			return none
		}
		c = w.Unwrap()
	}
}

// notifyOf returns the channel of the backend under c (looking through
// checked mode) that receives a token (buffered, coalesced) whenever a
// point-to-point request posted by this rank completes, so a rank waiting
// for progress can sleep on events instead of polling; nil where the
// backend has none (MPI, where progress needs polling: poll it with a short
// back-off). A backend has one by its method Notify() <-chan struct{},
// which returns the same channel every time.
func notifyOf(c Comm) <-chan struct{} {
	if n, ok := unwrap(c).(interface{ Notify() <-chan struct{} }); ok {
		return n.Notify()
	}
	return nil
}

// progressOf returns what drives the point-to-point bytes of the backend
// under c, or nil where they move without help. Under MPI a large message
// travels in fragments, each waiting for a progress call on both sides:
// the function drives it for up to budget, returning early when a request
// completes; false means nothing is in flight (there was nothing to drive).
// A caller waiting for bytes it knows are moving calls it instead of
// sleeping between polls, as MPI_Wait would spin. A backend has it by its
// method Progress(budget time.Duration) bool.
func progressOf(c Comm) func(budget time.Duration) bool {
	if p, ok := unwrap(c).(interface{ Progress(time.Duration) bool }); ok {
		return p.Progress
	}
	return nil
}

// stampComparer is an optional capability of an in-process backend (comm/local):
// checked mode's stamp rides the collective's own round, which compares
// every rank's before combining anything, instead of checked mode gathering
// [stamp | payload] from every rank. SetStamp gives the stamp of this
// rank's next collective on the communicator (that call only); after it
// returns, StampsAgreed says whether every rank gave an equal stamp. When
// they differ the collective returns without error and without a result,
// on every rank alike, and checked mode names the desync.
type stampComparer interface {
	SetStamp(stamp []int64)
	StampsAgreed() bool
}

func stamperOf(c Comm) stampComparer {
	s, _ := c.(stampComparer)
	return s
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

// vectoredOf returns the outermost Vectored of c and the communicators it
// wraps, or nil where the backend has no vectored I/O.
func vectoredOf(c Comm) Vectored { return outermost(c, Vectored.VectorIO) }

// members is an optional capability of a backend communicator: the world
// rank of each rank of its group, so that an error raised on a
// sub-communicator can name processes, not only group ranks. Every backend
// of this module has it.
type members interface {
	// WorldRanks returns the world rank of each group rank, group rank 0
	// first. The caller must not modify it.
	WorldRanks() []int
}

// worldRanksOf returns the world rank of each rank of c (looking through
// wrappers), or nil when the backend does not say.
func worldRanksOf(c Comm) []int {
	if m, ok := unwrap(c).(members); ok {
		return m.WorldRanks()
	}
	return nil
}
