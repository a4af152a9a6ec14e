package comm

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/kit"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// Sentinel errors. Backends and the checked layer wrap them with the rank,
// group and operation; callers test with errors.Is.
var (
	// ErrDesync: ranks of one group entered different collectives (or the
	// same collective with different argument shapes). See *DesyncError.
	ErrDesync = typed.ErrDesync
	// ErrCollectiveTimeout: a collective did not complete within its
	// deadline. See *TimeoutError for the ranks that never arrived.
	ErrCollectiveTimeout = errors.New("comm: collective timeout")
	// ErrWaitTimeout: a point-to-point Wait outlived its bound, where the
	// backend bounds waits (launch does). See *WaitTimeoutError.
	ErrWaitTimeout = errors.New("comm: point-to-point wait timeout")
	// ErrClosed: the communicator was closed.
	ErrClosed = errors.New("comm: communicator closed")
	// ErrBroken: an earlier collective on this group failed on some rank,
	// so the group cannot pair collectives any more.
	ErrBroken = errors.New("comm: communicator broken by an earlier failure")
	// ErrBadArgument: a caller error (negative rank or tag, nil buffer,
	// mismatched lengths, unknown op).
	ErrBadArgument = typed.ErrBadArgument
	// ErrTruncated: a message was longer than the receive buffer.
	ErrTruncated = errors.New("comm: message truncated")
	// ErrNotCancelled: Cancel was called on a request that can no longer be
	// withdrawn (a send, or a receive that already matched).
	ErrNotCancelled = errors.New("comm: request cannot be cancelled")
)

// Entry is one rank's view of a collective: what it entered, where.
type Entry struct {
	Rank  int // rank within the group
	Seq   uint64
	Kind  flight.Kind
	Site  string // the call path outside the collective plumbing
	Shape int64  // argument shape: count for allreduce, root for bcast
	// Guards are the rank-local values the rank recorded before it
	// entered (flight.Recorder.Guard): why it took this collective.
	Guards []flight.GuardValue
	hash   int64 // the call path's hash (desync reports)
}

func (e Entry) String() string {
	return fmt.Sprintf("rank %d: %s #%d at %s%s%s", e.Rank, e.Kind, e.Seq, e.Site, e.shapeString(), afterGuards(e.Guards))
}

// afterGuards is ", after fits=1 at executor/intake.go:88 (ctxIntake)"
// for the guard values a collective was entered after, "" for none.
func afterGuards(gs []flight.GuardValue) string {
	if len(gs) == 0 {
		return ""
	}
	return ", after " + flight.GuardsText(gs)
}

// shapeString renders the argument shape of a stamp (typed.DescribeShape).
func (e Entry) shapeString() string { return typed.DescribeShape(e.Kind, e.Shape) }

// DesyncError is returned (wrapping ErrDesync) on every rank that took part
// in a stamp exchange whose stamps disagreed.
type DesyncError struct {
	Group   string
	Self    int     // this rank within the group
	Entries []Entry // one per rank of the group, in rank order
	// Parted names where two ranks' call paths part ("a vs b"), when they
	// entered the same kind of collective from different branches.
	Parted string
	// WorldRanks maps each rank of Group to its rank in the world, when the
	// backend knows it (nil otherwise), so the message can name processes.
	WorldRanks []int
}

func (e *DesyncError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "comm: collective desync on group %q seen by rank %d%s:", e.Group, e.Self, worldSuffix(e.WorldRanks, e.Self))
	// Group ranks by identical entries so the message names each distinct
	// call site once with the ranks that were there.
	type key struct {
		seq   uint64
		kind  flight.Kind
		site  string
		shape int64
		hash  int64
	}
	var order []key
	ranks := map[key][]int{}
	guards := map[key][][]flight.GuardValue{}
	for _, en := range e.Entries {
		k := key{en.Seq, en.Kind, en.Site, en.Shape, en.hash}
		if _, ok := ranks[k]; !ok {
			order = append(order, k)
		}
		ranks[k] = append(ranks[k], en.Rank)
		guards[k] = append(guards[k], en.Guards)
	}
	// One clause per distinct collective, however many ranks entered it:
	// guard values the ranks of a clause recorded differently show their
	// range (flight.MergeGuards), so the message stays one line per side.
	for _, k := range order {
		en := Entry{Seq: k.seq, Kind: k.kind, Site: k.site, Shape: k.shape}
		fmt.Fprintf(&b, " ranks %v%s entered %s #%d at %s%s%s;", ranks[k], worldsSuffix(e.WorldRanks, ranks[k]), en.Kind, en.Seq, en.Site, en.shapeString(), afterGuards(flight.MergeGuards(guards[k])))
	}
	out := strings.TrimSuffix(b.String(), ";")
	if e.Parted != "" {
		out += "; their call paths part at " + e.Parted
	}
	return out
}

func (e *DesyncError) Unwrap() error { return ErrDesync }

// PeerRecords is one rank's flight recorder as seen by the stall inspector.
type PeerRecords struct {
	Rank    int // rank within the group
	Records []flight.OpRecord
	Err     error // set when the rank could not be asked (dead, unreachable)
	// Entered is how many collectives the rank had entered on the group
	// when it answered, for a backend that counts them (then Counted): a
	// rank whose count is below the waiting collective's Seq never arrived.
	Entered uint64
	Counted bool
	// Pending are the guard values the rank recorded after its last
	// collective began (flight.Recorder.Pending): what kept it from this one.
	Pending []flight.GuardValue
	// Returned: the rank's program has returned (in-process, its rank
	// function; under MPI, it is in Finalize): it enters nothing more, so
	// a collective that waits for it waits for a call never made.
	Returned bool
}

// TimeoutError is returned (wrapping ErrCollectiveTimeout) when a collective
// did not complete within its deadline.
type TimeoutError struct {
	Group   string
	Self    int
	Waiting Entry         // the collective this rank was waiting in
	Missing []int         // ranks of the group that never arrived
	Peers   []PeerRecords // last operations of every rank, when known
	Cause   error         // what the backend reported, when not the deadline itself
	// Bound is the timeout that ran out, when the backend bounds its
	// collectives itself (PropsOf(c).Timeout); 0 otherwise.
	Bound time.Duration
	// WorldRanks maps each rank of Group to its rank in the world, when the
	// backend knows it (nil otherwise), so the message can name processes.
	WorldRanks []int
}

func (e *TimeoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "comm: collective timeout on group %q", e.Group)
	if e.Bound > 0 {
		fmt.Fprintf(&b, " after %v", e.Bound)
	}
	fmt.Fprintf(&b, ": rank %d%s waited in %s #%d", e.Self, worldSuffix(e.WorldRanks, e.Self), e.Waiting.Kind, e.Waiting.Seq)
	if e.Waiting.Site != "" && e.Waiting.Site != "?" {
		fmt.Fprintf(&b, " at %s", e.Waiting.Site)
	}
	b.WriteString(afterGuards(e.Waiting.Guards))
	if len(e.Missing) == 0 {
		b.WriteString("; no rank is missing (every rank entered it)")
	} else {
		fmt.Fprintf(&b, "; ranks %v never arrived", e.Missing)
	}
	b.WriteString(worldsSuffix(e.WorldRanks, e.Missing))
	for _, p := range e.Peers {
		if !containsInt(e.Missing, p.Rank) {
			continue
		}
		who := fmt.Sprintf("rank %d%s", p.Rank, worldSuffix(e.WorldRanks, p.Rank))
		switch {
		case p.Err != nil:
			fmt.Fprintf(&b, "; %s unreachable: %v", who, p.Err)
		case p.Returned:
			fmt.Fprintf(&b, "; %s has returned from its program: it enters nothing more", who)
			if len(p.Records) > 0 {
				fmt.Fprintf(&b, " (its last: %s)", p.Records[len(p.Records)-1])
			}
		case len(p.Records) > 0:
			fmt.Fprintf(&b, "; %s last: %s", who, p.Records[len(p.Records)-1])
		case p.Counted:
			fmt.Fprintf(&b, "; %s is at #%d", who, p.Entered)
		default:
			fmt.Fprintf(&b, "; %s has recorded no operation", who)
		}
		if len(p.Pending) > 0 {
			fmt.Fprintf(&b, "; since then %s recorded %s", who, flight.GuardsText(p.Pending))
		}
	}
	if w := e.WaitsOn(); len(w) > 0 {
		fmt.Fprintf(&b, "; they wait in point-to-point on world ranks %v", w)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, " (backend: %v)", e.Cause)
	}
	return b.String()
}

// WaitsOn follows the missing ranks one step: the world ranks they wait
// on, where a missing rank's last flight record is a point-to-point
// operation still in progress (a rank-local blocking wait, such as a sync
// receive or a control send to a frozen peer, keeps it from the
// collective). Ranks the error names already are left out; nil when the
// records do not say.
func (e *TimeoutError) WaitsOn() []int {
	var out []int
	for _, p := range e.Peers {
		if !containsInt(e.Missing, p.Rank) || len(p.Records) == 0 || p.Returned {
			continue // a rank that returned waits on nothing: its request was left behind
		}
		r := p.Records[len(p.Records)-1]
		if !r.InProgress() || (r.Kind != flight.KindSend && r.Kind != flight.KindRecv) || r.Peer < 0 {
			continue
		}
		w := -1
		switch {
		case r.Group == "world":
			w = r.Peer
		case r.Group == e.Group && r.Peer < len(e.WorldRanks):
			w = e.WorldRanks[r.Peer]
		}
		if w < 0 || containsInt(out, w) || containsInt(e.namedWorld(), w) {
			continue
		}
		out = append(out, w)
	}
	return out
}

// namedWorld is the world ranks the error names itself: this rank and the
// missing ones (as group ranks where the mapping is unknown).
func (e *TimeoutError) namedWorld() []int {
	ranks := append([]int{e.Self}, e.Missing...)
	if e.WorldRanks == nil {
		return ranks
	}
	out := make([]int, 0, len(ranks))
	for _, r := range ranks {
		if r >= 0 && r < len(e.WorldRanks) {
			out = append(out, e.WorldRanks[r])
		}
	}
	return out
}

// worldsSuffix is " (world ranks [..])" for group ranks whose world ranks
// differ from them, "" otherwise.
func worldsSuffix(worlds, ranks []int) string {
	if w := kit.WorldOf(worlds, ranks); w != nil {
		return fmt.Sprintf(" (world ranks %v)", w)
	}
	return ""
}

// worldSuffix is " (world rank W)" for one group rank, as worldsSuffix.
func worldSuffix(worlds []int, rank int) string { return kit.WorldSuffix(worlds, rank) }

func (e *TimeoutError) Unwrap() error { return ErrCollectiveTimeout }

// FlightLog renders every peer's recent operations, oldest first, for a
// report or a log line.
func (e *TimeoutError) FlightLog() string {
	var b strings.Builder
	for _, p := range e.Peers {
		fmt.Fprintf(&b, "rank %d%s:\n", p.Rank, worldSuffix(e.WorldRanks, p.Rank))
		if p.Counted {
			fmt.Fprintf(&b, "  had entered %d collectives on %s\n", p.Entered, e.Group)
		}
		if p.Returned {
			b.WriteString("  had returned from its program\n")
		}
		if p.Err != nil {
			fmt.Fprintf(&b, "  unreachable: %v\n", p.Err)
		}
		for _, r := range p.Records {
			fmt.Fprintf(&b, "  %s\n", r)
		}
		if len(p.Pending) > 0 {
			fmt.Fprintf(&b, "  then recorded %s\n", flight.GuardsText(p.Pending))
		}
	}
	return b.String()
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// WaitTimeoutError is returned (wrapping ErrWaitTimeout) by a Wait on a
// send or receive that no peer matched within Bound: two ranks that both
// wait to send, or to receive, from each other; a tag or peer that does
// not match; a peer that returned or never posts; or (Held) a send its
// receiver took as a loan (comm.Lender) and has not released. The request
// stays in flight, as after a context error.
type WaitTimeoutError struct {
	Group string
	Self  int    // the group rank that waited
	Op    string // what it waited in: "receive from rank 1 tag 2", "send to rank 0 tag 1"
	// Held: the send matched a loan (IrecvLoan) whose receiver has not
	// released it, so the send is not done.
	Held  bool
	Bound time.Duration
	// WorldRanks maps each rank of Group to its world rank, when known.
	WorldRanks []int
}

func (e *WaitTimeoutError) Error() string {
	why := "no peer matched"
	if e.Held {
		why = "its receiver took as a loan and has not released"
	}
	return fmt.Sprintf("comm: point-to-point wait timeout on group %q after %v: rank %d%s waited in a %s that %s",
		e.Group, e.Bound, e.Self, worldSuffix(e.WorldRanks, e.Self), e.Op, why)
}

func (e *WaitTimeoutError) Unwrap() error { return ErrWaitTimeout }
