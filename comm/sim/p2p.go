package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/comm"
)

// mailbox holds the messages that arrived at one group rank and were not
// matched yet, and the receives it posted. Both lists keep their order,
// which gives MPI's matching order.
type mailbox struct {
	sends []*request // arrived, unmatched
	recvs []*request // posted, unmatched
}

// pairKey names an ordered channel of messages: one communicator, one
// sender, one receiver. Messages on it arrive in the order they were sent.
type pairKey struct {
	group    *group
	src, dst int
}

type request struct {
	g     *group
	send  bool
	buf   []byte
	src   int // send: the sender (group rank)
	dst   int // send: the receiver; recv: the rank that posted it
	peer  int // recv: wanted source (or AnySource)
	tag   int
	owner int // world rank of the rank that posted it
	done  bool
	st    comm.Status
	err   error
	// idx is the request's place in its owner's outstanding list until
	// the owner has seen it end (Test reported it done, Wait returned,
	// Cancel withdrew it); -1 after.
	idx int
}

// post records q as outstanding for its owner.
func (w *world) post(q *request) {
	l := &w.outstanding[q.owner]
	q.idx = len(*l)
	*l = append(*l, q)
}

// seen takes q off its owner's outstanding list: the owner saw it end.
func (q *request) seen() {
	if q.idx < 0 {
		return
	}
	l := &q.g.w.outstanding[q.owner]
	last := len(*l) - 1
	(*l)[q.idx] = (*l)[last]
	(*l)[q.idx].idx = q.idx
	(*l)[last] = nil
	*l = (*l)[:last]
	q.idx = -1
}

func (q *request) Test() (comm.Status, bool, error) {
	if !q.done {
		return comm.Status{}, false, nil
	}
	q.seen()
	return q.st, true, q.err
}

func (q *request) Wait(ctx context.Context) (comm.Status, error) {
	w := q.g.w
	me := w.ranks[q.owner]
	for !q.done {
		if ctx.Err() != nil {
			return comm.Status{}, fmt.Errorf("sim: wait for %s: %w", q.what(), context.Cause(ctx))
		}
		me.onReq = q
		w.park(me, "a wait for "+q.what()+" on "+q.g.name, time.Time{}, false)
	}
	q.seen()
	return q.st, q.err
}

func (q *request) what() string {
	if q.send {
		return fmt.Sprintf("send to %d tag %d", q.dst, q.tag)
	}
	return fmt.Sprintf("receive from %d tag %d", q.peer, q.tag)
}

var errCancelled = errors.New("sim: request cancelled")

func (q *request) Cancel() error {
	if q.send {
		return fmt.Errorf("%w: a send cannot be withdrawn", comm.ErrNotCancelled)
	}
	b := &q.g.boxes[q.dst]
	for i, p := range b.recvs {
		if p == q {
			b.recvs = append(b.recvs[:i], b.recvs[i+1:]...)
			q.err, q.done = errCancelled, true
			q.seen()
			return nil
		}
	}
	return fmt.Errorf("%w: the receive already matched", comm.ErrNotCancelled)
}

func matches(recv *request, src, tag int) bool {
	return (recv.peer == comm.AnySource || recv.peer == src) && (recv.tag == comm.AnyTag || recv.tag == tag)
}

// deliver copies send into recv, completes both, and wakes their owners.
func (g *group) deliver(send, recv *request) {
	n := copy(recv.buf, send.buf)
	recv.st = comm.Status{Source: send.src, Tag: send.tag, Len: n}
	if len(send.buf) > len(recv.buf) {
		recv.err = fmt.Errorf("%w: %d-byte message from rank %d tag %d into a %d-byte buffer",
			comm.ErrTruncated, len(send.buf), send.src, send.tag, len(recv.buf))
	}
	send.st = comm.Status{Source: send.src, Tag: send.tag, Len: len(send.buf)}
	recv.done, send.done = true, true
	g.w.completed(recv)
	g.w.completed(send)
}

// completed wakes the owner of a request that just completed: waiting on it
// in Wait, or on its completion events (a clock wait on Notify), whose
// channel gets a token.
func (w *world) completed(q *request) {
	select {
	case w.notify[q.owner] <- struct{}{}:
	default:
	}
	r := w.ranks[q.owner]
	if r.state == blocked && (r.onReq == q || r.onNotify) {
		w.wake(r)
	}
}

// arrive puts a message that reached its receiver in its mailbox, matching
// the first posted receive it fits.
func (g *group) arrive(send *request) {
	b := &g.boxes[send.dst]
	for i, recv := range b.recvs {
		if matches(recv, send.src, send.tag) {
			b.recvs = append(b.recvs[:i], b.recvs[i+1:]...)
			g.deliver(send, recv)
			return
		}
	}
	b.sends = append(b.sends, send)
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
	g, w := c.g, c.w
	q := &request{g: g, send: true, buf: buf, src: c.rank, dst: dest, tag: tag, owner: g.members[c.rank]}
	w.post(q)
	// The link model: the message reaches its receiver after latency +
	// bytes/bandwidth (plus seeded jitter), never before an earlier message
	// on the same pair (MPI's non-overtaking rule).
	bytes := len(buf)
	if n := w.cfg.PayloadScale; n > 1 && tag >= w.cfg.PayloadTagsFrom {
		head := min(bytes, w.cfg.PayloadHeader)
		bytes = head + (bytes-head)*n
	}
	arrival := w.now.Add(w.cfg.Fabric.Between(g.members[c.rank], g.members[dest]).Time(bytes))
	if w.cfg.Jitter > 0 {
		arrival = arrival.Add(time.Duration(w.rng.Int64N(int64(w.cfg.Jitter))))
	}
	key := pairKey{g, c.rank, dest}
	if last := w.lastArr[key]; arrival.Before(last) {
		arrival = last
	}
	w.lastArr[key] = arrival
	if arrival.Equal(w.now) {
		g.arrive(q)
	} else {
		w.at(arrival, true, func() { g.arrive(q) })
	}
	w.yield(w.ranks[q.owner])
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
	g := c.g
	q := &request{g: g, buf: buf, dst: c.rank, peer: src, tag: tag, owner: g.members[c.rank]}
	c.w.post(q)
	b := &g.boxes[c.rank]
	for i, send := range b.sends {
		if matches(q, send.src, send.tag) {
			b.sends = append(b.sends[:i], b.sends[i+1:]...)
			g.deliver(send, q)
			return q, nil
		}
	}
	b.recvs = append(b.recvs, q)
	return q, nil
}
