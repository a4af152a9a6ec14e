package local

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/internal/args"
)

// mailbox holds the unmatched messages addressed to one group rank and the
// receives it posted. Both lists keep posting order, which gives MPI's
// matching order.
type mailbox struct {
	mu    sync.Mutex
	sends []*request // unmatched sends addressed here
	recvs []*request // unmatched receives posted here
}

type request struct {
	box    *mailbox
	send   bool
	buf    []byte
	parts  [][]byte // send: IsendParts's message (buf is nil)
	rparts [][]byte // recv: IrecvParts's buffers (buf is nil)
	loan   bool     // recv: posted by IrecvLoan
	lent   *request // loan: the send whose bytes it holds until Release
	got    [][]byte // loan: the message, once matched
	// lentOut: a send matched by a loan, done when the loan is released.
	// Guarded by box.mu (the destination's mailbox, the loan's too).
	lentOut bool
	peer    int // recv: wanted source (or AnySource); send: sender rank
	tag     int
	owner   *rankComm // the rank that posted it
	dest    int       // send: the destination rank
	done    chan struct{}
	notify  chan struct{} // the poster\'s notifier
	st      comm.Status
	err     error
}

func (q *request) Test() (comm.Status, bool, error) {
	select {
	case <-q.done:
		return q.st, true, q.err
	default:
		return comm.Status{}, false, nil
	}
}

func (q *request) Wait(ctx context.Context) (comm.Status, error) {
	select {
	case <-q.done:
		return q.st, q.err
	default:
	}
	w := q.owner.w
	if !w.cfg.BoundWaits {
		select {
		case <-q.done:
		case <-ctx.Done():
		}
	} else {
		// A waiter per bounded wait: launch's (a user's program), not the
		// executor's hot path, which bounds its own waits.
		wt := w.cfg.Clock.NewWaiter()
		defer wt.Stop()
		_ = wt.Wait(ctx, q.done, w.cfg.Clock.Now().Add(w.cfg.Timeout))
	}
	// Both may be ready: a completed request wins, whatever woke the wait.
	select {
	case <-q.done:
		return q.st, q.err
	default:
	}
	if ctx.Err() != nil {
		return comm.Status{}, fmt.Errorf("local: wait for %s: %w", q.what(), context.Cause(ctx))
	}
	c := q.owner
	q.box.mu.Lock()
	held := q.lentOut
	q.box.mu.Unlock()
	return comm.Status{}, &comm.WaitTimeoutError{Group: c.g.name, Self: c.rank, Op: q.what(), Held: held, Bound: w.cfg.Timeout, WorldRanks: slices.Clone(c.g.members)}
}

func (q *request) what() string {
	if q.send {
		return fmt.Sprintf("send to rank %d tag %d", q.dest, q.tag)
	}
	if q.peer == comm.AnySource {
		return fmt.Sprintf("receive from any rank tag %d", q.tag)
	}
	return fmt.Sprintf("receive from rank %d tag %d", q.peer, q.tag)
}

func (q *request) Cancel() error {
	if q.send {
		return fmt.Errorf("%w: a send cannot be withdrawn", comm.ErrNotCancelled)
	}
	b := q.box
	b.mu.Lock()
	for i, p := range b.recvs {
		if p == q {
			b.recvs = append(b.recvs[:i], b.recvs[i+1:]...)
			b.mu.Unlock()
			q.err = errCancelled
			close(q.done)
			return nil
		}
	}
	b.mu.Unlock()
	return fmt.Errorf("%w: the receive already matched", comm.ErrNotCancelled)
}

var errCancelled = errors.New("local: request cancelled")

func matches(recv *request, src, tag int) bool {
	return (recv.peer == comm.AnySource || recv.peer == src) && (recv.tag == comm.AnyTag || recv.tag == tag)
}

// message returns a send's bytes as parts.
func (q *request) message() [][]byte {
	if q.parts != nil {
		return q.parts
	}
	return [][]byte{q.buf}
}

func partsLen(parts [][]byte) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// deliver copies send into recv and completes both; a loan instead gets
// the sender's bytes, and the send completes when the loan is released.
// Caller holds the box.
func deliver(send, recv *request) {
	size := len(send.buf)
	if send.parts != nil {
		size = partsLen(send.parts)
	}
	send.st = comm.Status{Source: send.peer, Tag: send.tag, Len: size}
	if recv.loan {
		recv.st = send.st
		send.lentOut = true
		recv.got, recv.lent = send.message(), send
		close(recv.done)
		poke(recv.notify)
		return
	}
	into := recv.rparts
	if into == nil {
		into = [][]byte{recv.buf}
	}
	n := copyParts(into, send.message())
	recv.st = comm.Status{Source: send.peer, Tag: send.tag, Len: n}
	if room := partsLen(into); size > room {
		recv.err = fmt.Errorf("%w: %d-byte message from rank %d tag %d into a %d-byte buffer",
			comm.ErrTruncated, size, send.peer, send.tag, room)
	}
	close(recv.done)
	close(send.done)
	poke(recv.notify)
	poke(send.notify)
}

// copyParts copies the concatenation of src into the buffers of dst, in
// order, as far as they hold, and returns the bytes copied.
func copyParts(dst, src [][]byte) int {
	n, di, doff := 0, 0, 0
	for _, s := range src {
		for len(s) > 0 && di < len(dst) {
			k := copy(dst[di][doff:], s)
			s, doff, n = s[k:], doff+k, n+k
			if doff == len(dst[di]) {
				di, doff = di+1, 0
			}
		}
	}
	return n
}

// VectorIO implements comm.Vectored.
func (c *rankComm) VectorIO() bool { return true }

// IrecvParts implements comm.Vectored.
func (c *rankComm) IrecvParts(parts [][]byte, src, tag int) (comm.Request, error) {
	if err := c.usable("IrecvParts"); err != nil {
		return nil, err
	}
	if err := args.Check(c, "IrecvParts", src, tag, true); err != nil {
		return nil, err
	}
	if parts == nil {
		parts = [][]byte{}
	}
	return c.post(&request{box: &c.g.boxes[c.rank], rparts: parts, peer: src, tag: tag}), nil
}

// Parts implements comm.Loan.
func (q *request) Parts() [][]byte {
	select {
	case <-q.done:
		return q.got
	default:
		return nil
	}
}

// Release implements comm.Loan: the lending send completes.
func (q *request) Release() {
	b := q.box
	b.mu.Lock()
	send := q.lent
	q.lent, q.got = nil, nil
	b.mu.Unlock()
	if send != nil {
		close(send.done)
		poke(send.notify)
	}
}

// LendsBytes implements comm.Lender: goroutine ranks share memory.
func (c *rankComm) LendsBytes() bool { return true }

// IsendParts implements comm.Lender.
func (c *rankComm) IsendParts(parts [][]byte, dest, tag int) (comm.Request, error) {
	if err := c.usable("IsendParts"); err != nil {
		return nil, err
	}
	if err := args.Check(c, "IsendParts", dest, tag, false); err != nil {
		return nil, err
	}
	if parts == nil {
		parts = [][]byte{}
	}
	return c.post(&request{box: &c.g.boxes[dest], send: true, parts: parts, peer: c.rank, tag: tag, dest: dest}), nil
}

// IrecvLoan implements comm.Lender.
func (c *rankComm) IrecvLoan(src, tag int) (comm.Loan, error) {
	if err := c.usable("IrecvLoan"); err != nil {
		return nil, err
	}
	if err := args.Check(c, "IrecvLoan", src, tag, true); err != nil {
		return nil, err
	}
	q := &request{box: &c.g.boxes[c.rank], loan: true, peer: src, tag: tag}
	c.post(q)
	return q, nil
}

// post matches q against the other side's list of its mailbox, or queues
// it there.
func (c *rankComm) post(q *request) *request {
	q.done, q.notify, q.owner = make(chan struct{}), c.w.notify[c.WorldRank()], c
	b := q.box
	b.mu.Lock()
	defer b.mu.Unlock()
	if q.send {
		for i, recv := range b.recvs {
			if matches(recv, c.rank, q.tag) {
				b.recvs = append(b.recvs[:i], b.recvs[i+1:]...)
				deliver(q, recv)
				return q
			}
		}
		b.sends = append(b.sends, q)
		return q
	}
	for i, send := range b.sends {
		if matches(q, send.peer, send.tag) {
			b.sends = append(b.sends[:i], b.sends[i+1:]...)
			deliver(send, q)
			return q
		}
	}
	b.recvs = append(b.recvs, q)
	return q
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *rankComm) Isend(buf []byte, dest, tag int) (comm.Request, error) {
	if err := c.usable("Isend"); err != nil {
		return nil, err
	}
	if err := args.Check(c, "Isend", dest, tag, false); err != nil {
		return nil, err
	}
	if buf == nil {
		return nil, fmt.Errorf("%w: Isend: nil buffer (use an empty slice for an empty message)", comm.ErrBadArgument)
	}
	return c.post(&request{box: &c.g.boxes[dest], send: true, buf: buf, peer: c.rank, tag: tag, dest: dest}), nil
}

func (c *rankComm) Irecv(buf []byte, src, tag int) (comm.Request, error) {
	if err := c.usable("Irecv"); err != nil {
		return nil, err
	}
	if err := args.Check(c, "Irecv", src, tag, true); err != nil {
		return nil, err
	}
	if buf == nil {
		return nil, fmt.Errorf("%w: Irecv: nil buffer (use an empty slice for an empty message)", comm.ErrBadArgument)
	}
	return c.post(&request{box: &c.g.boxes[c.rank], buf: buf, peer: src, tag: tag}), nil
}
