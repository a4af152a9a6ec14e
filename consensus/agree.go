package consensus

import (
	"context"
	"errors"
	"fmt"

	"github.com/rankrun/rankrun/comm"
)

// A status check in one collective. Each rank contributes one word per
// session that is over on it: the request id with its local state and
// whether a write of this rank is still in flight. Because a session's
// terminal state never changes, the ready ids and their outcome follow
// from the same data: ready = the ids every rank contributes (Ready), and
// for those the rules of Decide. Between hops the words carry the raw
// tallies (any cancelled, any failed, every rank completed, every rank
// quiesced), so the hierarchical fold equals the flat one.

// State is a session's terminal state on one rank.
type State uint8

// Terminal states (the zero State is invalid).
const (
	Cancelled State = 1 + iota
	Failed
	Completed
)

func (s State) String() string {
	switch s {
	case Cancelled:
		return "cancelled"
	case Failed:
		return "failed"
	case Completed:
		return "completed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// The low flagBits bits of a word are tallies; the id sits above them.
const (
	flagBits   = 4
	fCancelled = 1 << 0 // some rank saw it cancelled
	fFailed    = 1 << 1 // some rank saw it fail
	fCompleted = 1 << 2 // every rank saw it complete
	fQuiesced  = 1 << 3 // no rank has a write in flight
	flagMask   = 1<<flagBits - 1

	// MaxID is the largest id a word can carry.
	MaxID = 1<<(63-flagBits) - 1

	// voteMagic heads every contribution (with its length in the low 32
	// bits): an allgather paired with a different one is malformed, not
	// misread.
	voteMagic = int64(0x5252_4356) << 32 // "RRCV"
)

// Word packs one rank's view of one terminal session. It panics on an id
// above MaxID or an invalid state (a caller bug).
func Word(id uint64, st State, quiesced bool) int64 {
	if id > MaxID {
		panic(fmt.Sprintf("consensus: id %d above MaxID", id))
	}
	var f int64
	switch st {
	case Cancelled:
		f = fCancelled
	case Failed:
		f = fFailed
	case Completed:
		f = fCompleted
	default:
		panic(fmt.Sprintf("consensus: word for id %d with invalid state %v", id, st))
	}
	if quiesced {
		f |= fQuiesced
	}
	return int64(id)<<flagBits | f
}

// WordID is the id a word carries.
func WordID(w int64) uint64 { return uint64(w) >> flagBits }

// Decision is the group's verdict on one ready id.
type Decision struct {
	ID       uint64
	Status   State // precedence cancelled > failed > completed
	Quiesced bool  // no rank has a write in flight: the outcome may apply
}

// ErrUnsorted: the caller's own words were not strictly ascending by id.
var ErrUnsorted = errors.New("consensus: words not strictly ascending by id")

// Agree is a whole status check's consensus in one collective per hop of
// scope: it returns, ascending by id, a Decision for every id that every
// rank of the combined scope contributed. mine must be strictly ascending
// by id (one word per terminal session, from Word). An empty scope, or
// hops of one rank, need no collective. The result aliases g's buffers
// until g's next call. Steady state allocates nothing.
//
// Agree is a collective: see Gatherer.
func (g *Gatherer) Agree(ctx context.Context, scope []comm.Comm, mine []int64) ([]Decision, error) {
	return g.agree(ctx, scope, mine, false)
}

// AgreeVotes is Agree over words kept in order by construction: it skips
// Agree's check of the order, a pass over every word of every status check.
func (g *Gatherer) AgreeVotes(ctx context.Context, scope []comm.Comm, mine *Votes) ([]Decision, error) {
	return g.agree(ctx, scope, mine.words, true)
}

// agree is Agree; sorted says mine is known to be strictly ascending.
func (g *Gatherer) agree(ctx context.Context, scope []comm.Comm, mine []int64, sorted bool) ([]Decision, error) {
	cur, checked := mine, sorted // cur: the carried words (mine until the first fold)
	for hop, c := range scope {
		if c == nil {
			return nil, fmt.Errorf("consensus: agree: hop %d of %d: nil communicator", hop, len(scope))
		}
		if c.Size() == 1 {
			continue
		}
		if err := g.vote(cur, !checked); err != nil {
			return nil, err
		}
		checked = true
		if err := g.allgather(ctx, c); err != nil {
			return nil, wrapHop("agree", hop, len(scope), c, err)
		}
		if err := g.fold(c.Size()); err != nil {
			return nil, wrapHop("agree", hop, len(scope), c, err)
		}
		cur = g.acc
	}
	if !checked {
		if err := ascending(mine); err != nil {
			return nil, err
		}
	}
	g.dec = g.dec[:0]
	for _, w := range cur {
		d := Decision{ID: WordID(w), Quiesced: w&fQuiesced != 0}
		switch {
		case w&fCancelled != 0:
			d.Status = Cancelled
		case w&fFailed != 0:
			d.Status = Failed
		default:
			d.Status = Completed
		}
		g.dec = append(g.dec, d)
	}
	return g.dec, nil
}

// vote writes g.send: the vote header (magic and length), then words, in
// one pass that also checks, when check is set, that the words are
// strictly ascending by id (this rank's own words, on the first hop).
func (g *Gatherer) vote(words []int64, check bool) error {
	n := len(words) + 1
	if cap(g.send) < n {
		g.send = make([]int64, n, n+n/2)
	}
	send := g.send[:n]
	send[0] = voteMagic | int64(len(words))
	body := send[1:]
	body = body[:len(words)]
	if !check {
		copy(body, words)
	} else {
		prev := int64(-1)
		for i, w := range words {
			id := w >> flagBits
			if id <= prev {
				return fmt.Errorf("%w: id %d after %d", ErrUnsorted, WordID(w), prev)
			}
			prev = id
			body[i] = w
		}
	}
	g.send = send
	return nil
}

// ascending checks that words are strictly ascending by id.
func ascending(words []int64) error {
	for i := 1; i < len(words); i++ {
		if words[i-1]>>flagBits >= words[i]>>flagBits {
			return fmt.Errorf("%w: id %d after %d", ErrUnsorted, WordID(words[i]), WordID(words[i-1]))
		}
	}
	return nil
}

// fold sets g.acc to the intersection (by id) of every rank's gathered
// words, tallies combined. Each contribution is checked by its header (the
// vote magic and its length): data of a different allgather is malformed,
// not misread. Words are read only as far as the intersection needs, and
// only the ids every rank holds are written.
func (g *Gatherer) fold(size int) error {
	for r := range size {
		v := g.got.Of(r)
		if len(v) == 0 || v[0]&^0xffff_ffff != voteMagic || int(v[0]&0xffff_ffff) != len(v)-1 {
			return fmt.Errorf("%w: rank %d: not a status-check vote (%d values)", ErrMalformedVote, r, len(v))
		}
	}
	g.acc = intersectWords(g.acc[:0], g.got.Of(0)[1:], g.got.Of(1)[1:])
	for r := 2; r < size && len(g.acc) > 0; r++ {
		g.acc = intersectWords(g.acc[:0], g.acc, g.got.Of(r)[1:])
	}
	return nil
}

// intersectWords appends to dst the words of acc whose id b also holds,
// each with the tallies of both combined, and returns it. Both are
// ascending by id; dst may be acc[:0] (it is written no faster than acc is
// read). Each side gallops past the ids the other lacks, so disjoint runs
// cost their logarithm.
func intersectWords(dst, acc, b []int64) []int64 {
	i, j := 0, 0
	for i < len(acc) && j < len(b) {
		ai, bj := acc[i]>>flagBits, b[j]>>flagBits
		switch {
		case ai < bj:
			i = gallop(acc, i, bj) // ids of acc that b lacks: not ready
		case ai > bj:
			j = gallop(b, j, ai)
		default:
			dst = append(dst, ai<<flagBits|combine(acc[i]&flagMask, b[j]&flagMask))
			i, j = i+1, j+1
		}
	}
	return dst
}

// gallop returns the first index at or after lo whose id is >= id (s[lo]'s
// is below it): exponential steps, then a binary search.
func gallop(s []int64, lo int, id int64) int {
	step, hi := 1, lo+1
	for hi < len(s) && s[hi]>>flagBits < id {
		lo = hi
		step *= 2
		hi = lo + step
	}
	hi = min(hi, len(s))
	for lo+1 < hi { // s[lo] < id; s[hi] >= id or hi == len(s)
		m := int(uint(lo+hi) >> 1)
		if s[m]>>flagBits < id {
			lo = m
		} else {
			hi = m
		}
	}
	return hi
}

// combine folds two ranks' tallies of one id (DESIGN.md §4).
func combine(fa, fb int64) int64 {
	var f int64
	f |= (fa | fb) & fCancelled // cancelled: union
	f |= (fa | fb) & fFailed    // failed: union
	f |= (fa & fb) & fCompleted // completed: intersection
	f |= (fa & fb) & fQuiesced  // quiesced: intersection
	return f
}
