package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/internal/args"
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
	parts [][]byte // IsendParts's message, IrecvParts's buffers (buf is nil)
	src   int      // send: the sender (group rank)
	dst   int      // send: the receiver; recv: the rank that posted it
	peer  int      // recv: wanted source (or AnySource)
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
	if !q.done && !q.send && q.g.w.arrRng != nil {
		q.g.w.arriveEarly(q)
	}
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
		w.park(me, waitOn{req: q}, time.Time{}, false)
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

// size is the bytes a send carries, or a receive has room for.
func (q *request) size() int {
	if q.parts == nil {
		return len(q.buf)
	}
	n := 0
	for _, p := range q.parts {
		n += len(p)
	}
	return n
}

// scatter copies the message of send (one buffer or parts) into the
// buffers of recv, in order, as far as they hold it; it returns the bytes
// copied.
func scatter(recv, send *request) int {
	from, into := send.parts, recv.parts
	if from == nil {
		from = [][]byte{send.buf}
	}
	if into == nil {
		into = [][]byte{recv.buf}
	}
	n := 0
	var dst []byte
	for _, src := range from {
		for len(src) > 0 {
			for len(dst) == 0 {
				if len(into) == 0 {
					return n
				}
				dst, into = into[0], into[1:]
			}
			k := copy(dst, src)
			dst, src, n = dst[k:], src[k:], n+k
		}
	}
	return n
}

// deliver copies send into recv, completes both, and wakes their owners.
func (g *group) deliver(send, recv *request) {
	size := send.size()
	var n int
	if send.parts == nil && recv.parts == nil {
		n = copy(recv.buf, send.buf)
	} else {
		n = scatter(recv, send)
	}
	recv.st = comm.Status{Source: send.src, Tag: send.tag, Len: n}
	if room := recv.size(); size > room {
		recv.err = fmt.Errorf("%w: %d-byte message from rank %d tag %d into a %d-byte buffer",
			comm.ErrTruncated, size, send.src, send.tag, room)
	}
	send.st = comm.Status{Source: send.src, Tag: send.tag, Len: size}
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
	if err := args.Check(c, "Isend", dest, tag, false); err != nil {
		return nil, err
	}
	if buf == nil {
		return nil, fmt.Errorf("%w: Isend: nil buffer (use an empty slice for an empty message)", comm.ErrBadArgument)
	}
	return c.send(&request{buf: buf}, dest, tag), nil
}

// VectorIO implements comm.Vectored: a message goes from its parts to the
// receiver's parts in one copy, at its arrival, as MPI's hindexed
// datatypes do; its link time is that of the one message they make.
func (c *rankComm) VectorIO() bool { return true }

// IsendParts implements comm.Vectored.
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
	return c.send(&request{parts: parts}, dest, tag), nil
}

// send posts send request q (its message set) to dest.
func (c *rankComm) send(q *request, dest, tag int) *request {
	g, w := c.g, c.w
	q.g, q.send, q.src, q.dst, q.tag, q.owner = g, true, c.rank, dest, tag, g.members[c.rank]
	w.post(q)
	// The link model: the message reaches its receiver after latency +
	// bytes/bandwidth (plus seeded jitter), never before an earlier message
	// on the same pair (MPI's non-overtaking rule).
	bytes := q.size()
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
	switch {
	case arrival.Equal(w.now) && w.scheduled[key] == 0 && len(w.inflight[key]) == 0:
		g.arrive(q)
	case w.inflight != nil:
		f := airborne{q: q}
		f.ev = w.at(arrival, true, func() { w.landed(key, q); g.arrive(q) })
		w.inflight[key] = append(w.inflight[key], f)
	case w.scheduled != nil:
		// An earlier message of the pair may still be due at this very
		// instant (its event not yet run): this one goes after it, never
		// inline before it.
		w.scheduled[key]++
		w.at(arrival, true, func() { w.scheduled[key]--; g.arrive(q) })
	default:
		w.at(arrival, true, func() { g.arrive(q) })
	}
	w.yield(w.ranks[q.owner])
	return q
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
	return c.recv(&request{buf: buf}, src, tag), nil
}

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
	return c.recv(&request{parts: parts}, src, tag), nil
}

// recv posts receive request q (its buffers set) from src.
func (c *rankComm) recv(q *request, src, tag int) *request {
	g := c.g
	q.g, q.dst, q.peer, q.tag, q.owner = g, c.rank, src, tag, g.members[c.rank]
	c.w.post(q)
	b := &g.boxes[c.rank]
	for i, send := range b.sends {
		if matches(q, send.src, send.tag) {
			b.sends = append(b.sends[:i], b.sends[i+1:]...)
			g.deliver(send, q)
			return q
		}
	}
	b.recvs = append(b.recvs, q)
	return q
}

// airborne is a message in flight (EarlyArrivals) and its arrival event.
type airborne struct {
	q  *request
	ev *event
}

// landed takes q off its pair's messages in flight: it arrives now.
func (w *world) landed(key pairKey, q *request) {
	fl := w.inflight[key]
	for i, f := range fl {
		if f.q == q {
			fl = append(fl[:i], fl[i+1:]...)
			break
		}
	}
	if len(fl) == 0 {
		delete(w.inflight, key)
		return
	}
	w.inflight[key] = fl
}

// arriveEarly is the choice a Test of receive q makes under EarlyArrivals:
// of the pairs whose next message in flight q would match (only a pair's
// next: messages of one pair arrive in order), one has arrived by now, or
// none has yet, each as likely as the others taken together. The choice
// is part of the schedule.
func (w *world) arriveEarly(q *request) {
	g := q.g
	var cands [8]pairKey
	pairs := cands[:0]
	for s := range g.members {
		if q.peer != comm.AnySource && s != q.peer {
			continue
		}
		key := pairKey{g, s, q.dst}
		if fl := w.inflight[key]; len(fl) > 0 && matches(q, fl[0].q.src, fl[0].q.tag) {
			pairs = append(pairs, key)
		}
	}
	if len(pairs) == 0 {
		return
	}
	i := w.arrRng.IntN(2 * len(pairs))
	w.schedule = (w.schedule ^ uint64(0x9e37+i)) * 1099511628211
	if i >= len(pairs) {
		return // not arrived yet
	}
	key := pairs[i]
	f := w.inflight[key][0]
	w.cancelEvent(f.ev)
	w.landed(key, f.q)
	g.arrive(f.q)
}
