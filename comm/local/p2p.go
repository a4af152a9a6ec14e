package local

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rankrun/rankrun/comm"
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
	peer   int // recv: wanted source (or AnySource); send: sender rank
	tag    int
	done   chan struct{}
	notify chan struct{} // the poster\'s notifier
	st     comm.Status
	err    error
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
	select {
	case <-q.done:
	case <-ctx.Done():
	}
	// Both may be ready: a completed request wins, whatever select picked.
	select {
	case <-q.done:
		return q.st, q.err
	default:
		return comm.Status{}, fmt.Errorf("local: wait for %s: %w", q.what(), context.Cause(ctx))
	}
}

func (q *request) what() string {
	if q.send {
		return fmt.Sprintf("send tag %d", q.tag)
	}
	return fmt.Sprintf("receive from %d tag %d", q.peer, q.tag)
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

// deliver copies send into recv and completes both. Caller holds the box.
func deliver(send, recv *request) {
	n := copy(recv.buf, send.buf)
	recv.st = comm.Status{Source: send.peer, Tag: send.tag, Len: n}
	if len(send.buf) > len(recv.buf) {
		recv.err = fmt.Errorf("%w: %d-byte message from rank %d tag %d into a %d-byte buffer",
			comm.ErrTruncated, len(send.buf), send.peer, send.tag, len(recv.buf))
	}
	send.st = comm.Status{Source: send.peer, Tag: send.tag, Len: len(send.buf)}
	close(recv.done)
	close(send.done)
	poke(recv.notify)
	poke(send.notify)
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
	if err := comm.CheckArgs(c, "Isend", dest, tag, false); err != nil {
		return nil, err
	}
	if buf == nil {
		return nil, fmt.Errorf("%w: Isend: nil buffer (use an empty slice for an empty message)", comm.ErrBadArgument)
	}
	b := &c.g.boxes[dest]
	q := &request{box: b, send: true, buf: buf, peer: c.rank, tag: tag, done: make(chan struct{}), notify: c.w.notify[c.WorldRank()]}
	b.mu.Lock()
	for i, recv := range b.recvs {
		if matches(recv, c.rank, tag) {
			b.recvs = append(b.recvs[:i], b.recvs[i+1:]...)
			deliver(q, recv)
			b.mu.Unlock()
			return q, nil
		}
	}
	b.sends = append(b.sends, q)
	b.mu.Unlock()
	return q, nil
}

func (c *rankComm) Irecv(buf []byte, src, tag int) (comm.Request, error) {
	if err := c.usable("Irecv"); err != nil {
		return nil, err
	}
	if err := comm.CheckArgs(c, "Irecv", src, tag, true); err != nil {
		return nil, err
	}
	if buf == nil {
		return nil, fmt.Errorf("%w: Irecv: nil buffer (use an empty slice for an empty message)", comm.ErrBadArgument)
	}
	b := &c.g.boxes[c.rank]
	q := &request{box: b, buf: buf, peer: src, tag: tag, done: make(chan struct{}), notify: c.w.notify[c.WorldRank()]}
	b.mu.Lock()
	for i, send := range b.sends {
		if matches(q, send.peer, send.tag) {
			b.sends = append(b.sends[:i], b.sends[i+1:]...)
			deliver(send, q)
			b.mu.Unlock()
			return q, nil
		}
	}
	b.recvs = append(b.recvs, q)
	b.mu.Unlock()
	return q, nil
}
