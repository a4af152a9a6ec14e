package comm

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"
	"unsafe"
)

// DefaultCollectiveTimeout bounds a checked collective when CheckConfig
// leaves Timeout zero.
const DefaultCollectiveTimeout = 30 * time.Second

// inspectTimeout bounds how long the stall inspector waits for peers.
const inspectTimeout = 2 * time.Second

// Inspector is an optional capability of a backend communicator. After a
// checked collective times out, the checked layer asks it for every rank's
// flight records to tell which ranks never arrived and what they did last.
// In-process this reads the peers' recorders; under MPI it asks the peers.
type Inspector interface {
	InspectPeers(ctx context.Context) []PeerRecords
}

// Aborter is an optional capability: a backend that can end the whole job
// (MPI_Abort) after an unrecoverable collective error.
type Aborter interface {
	Abort(code int, reason error)
}

// CheckConfig configures checked mode.
type CheckConfig struct {
	// Timeout bounds every collective (DefaultCollectiveTimeout when 0)
	// over a backend that does not bound its collectives itself (see
	// Bounded); over one that does, the backend's bound applies.
	Timeout time.Duration
	// Recorder is this rank's flight recorder; the backend's Inspector
	// must return the same records for this rank.
	Recorder *Recorder
}

// stampLen is the number of int64s in a stamp: magic, sequence number,
// kind, call-path hash, innermost call site, argument shape.
const stampLen = 6

const stampMagic = 0x52524e // "RRN"

// anchor is a function entry used to turn call-site program counters into
// offsets that are equal in every process running the same binary, even a
// position-independent one.
var anchor = reflect.ValueOf(NewChecked).Pointer()

type checked struct {
	raw     Comm
	cfg     CheckConfig
	bounded bool       // the backend bounds its collectives (Bounded)
	mu      sync.Mutex // serialises collectives so seq matches call order
	seq     uint64
	broken  error
	path    Path     // of the collective in progress
	send    []int64  // stamp, then payload: the one backend collective's input
	bsend   []int64  // Bcast: root's length and bytes as words
	gather  Gathered // every rank's stamp and payload
	gbuf    []int64
}

// NewChecked wraps raw in checked mode (see the package doc). Children from
// Split are checked too, with the same configuration.
//
// Over a Bounded backend the backend's bound applies, unless cfg.Timeout
// asks for a shorter one: then checked mode bounds each collective itself.
func NewChecked(raw Comm, cfg CheckConfig) Comm {
	return &checked{raw: raw, cfg: cfg.filled(), bounded: cfg.backendBounds(raw)}
}

func (cfg CheckConfig) filled() CheckConfig {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultCollectiveTimeout
	}
	return cfg
}

// backendBounds reports whether raw's own bound is the one that applies.
func (cfg CheckConfig) backendBounds(raw Comm) bool {
	b := TimeoutOf(raw)
	return b > 0 && (cfg.Timeout <= 0 || cfg.Timeout >= b)
}

// Wrapper is implemented by a communicator that wraps another (checked
// mode, a test's counting layer), so that the optional capabilities of the
// backend underneath (Notifier, Inspector, Bounded, ...) stay reachable.
type Wrapper interface {
	Unwrap() Comm
}

// Unwrap returns the backend communicator under any number of wrappers
// (c itself when it wraps nothing).
func Unwrap(c Comm) Comm {
	for {
		w, ok := c.(Wrapper)
		if !ok {
			return c
		}
		c = w.Unwrap()
	}
}

// IsChecked reports whether c is in checked mode (under any wrappers).
func IsChecked(c Comm) bool {
	for {
		if _, ok := c.(*checked); ok {
			return true
		}
		w, ok := c.(Wrapper)
		if !ok {
			return false
		}
		c = w.Unwrap()
	}
}

// Unwrap implements Wrapper.
func (c *checked) Unwrap() Comm { return c.raw }

func (c *checked) Rank() int    { return c.raw.Rank() }
func (c *checked) Size() int    { return c.raw.Size() }
func (c *checked) Name() string { return c.raw.Name() }
func (c *checked) Close() error { return c.raw.Close() }

// noCancel is the cancel function of a collective that needs no deadline
// of its own (a Bounded backend bounds it).
func noCancel() {}

// entry is this rank's view of the collective in progress, for errors.
func (c *checked) entry(kind Kind, shape int64) Entry {
	return Entry{Rank: c.raw.Rank(), Seq: c.seq, Kind: kind, Site: c.path.Site(), Shape: shape}
}

// begin runs the one backend collective of a checked collective of kind
// with shape, whose call path the exported method captured into path:
// every rank contributes its stamp followed by payload, through
// AllgatherInt64s, and every rank checks that all stamps agree. Whatever
// collective each rank is in, they all pair the same backend operation, so
// a desync is seen (and named), never misread. It returns the flight-record
// id and the context of the operation; the contributions are in c.gather,
// each after its stamp. The caller holds c.mu.
func (c *checked) begin(ctx context.Context, kind Kind, shape int64, path *Path, payload []int64) (uint64, context.Context, context.CancelFunc, error) {
	if c.broken != nil {
		return 0, ctx, noCancel, fmt.Errorf("%w (group %q, rank %d): %w", ErrBroken, c.raw.Name(), c.raw.Rank(), c.broken)
	}
	c.seq++
	c.path = *path
	id := c.cfg.Recorder.BeginAt(c.raw.Name(), c.seq, kind, &c.path)
	tctx, cancel := ctx, context.CancelFunc(noCancel)
	if !c.bounded {
		tctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
	}
	inner := int64(0)
	if c.path.n > 0 {
		inner = c.path.pcs[0]
	}
	s := [stampLen]int64{stampMagic, int64(c.seq), int64(kind), c.path.hash(), inner, shape}
	c.send = append(append(c.send[:0], s[:]...), payload...)
	if err := c.raw.AllgatherInt64s(tctx, c.send, &c.gather); err != nil {
		return id, tctx, cancel, c.fail(ctx, tctx, id, c.entry(kind, shape), err)
	}
	if c.stampsAgree() {
		return id, tctx, cancel, nil
	}
	// Every rank gathered the same stamps, so every rank takes this branch
	// and the gather of call paths below pairs up.
	err := c.desync(tctx, s)
	c.broken = err
	c.cfg.Recorder.End(id, err)
	return id, tctx, cancel, err
}

// stampsAgree reports whether every rank's gathered stamp equals rank 0's
// (the same answer on every rank: they gathered the same data).
func (c *checked) stampsAgree() bool {
	first := c.gather.Of(0)
	if len(first) < stampLen {
		return false
	}
	for r := 1; r < c.raw.Size(); r++ {
		v := c.gather.Of(r)
		if len(v) < stampLen || [stampLen]int64(v[:stampLen]) != [stampLen]int64(first[:stampLen]) {
			return false
		}
	}
	return true
}

// payload is rank r's contribution after its stamp.
func (c *checked) payload(r int) []int64 { return c.gather.Of(r)[stampLen:] }

// desync gathers every rank's stamp and call path and names, for each
// distinct collective, the ranks that entered it and where.
func (c *checked) desync(ctx context.Context, s [stampLen]int64) error {
	c.gbuf = append(c.gbuf[:0], s[0], s[1], s[2], s[3], s[5], int64(c.path.n))
	c.gbuf = append(c.gbuf, c.path.pcs[:c.path.n]...)
	if err := c.raw.AllgatherInt64s(ctx, c.gbuf, &c.gather); err != nil {
		return fmt.Errorf("%w on group %q (gathering stamps: %v)", ErrDesync, c.raw.Name(), err)
	}
	de := &DesyncError{Group: c.raw.Name(), Self: c.raw.Rank()}
	paths := make([]Path, c.raw.Size())
	for r := range c.raw.Size() {
		v := c.gather.Of(r)
		if len(v) < 6 || v[0] != stampMagic || v[5] < 0 || v[5] > pathDepth || len(v) != 6+int(v[5]) {
			de.Entries = append(de.Entries, Entry{Rank: r, Site: "(not a checked collective)"})
			continue
		}
		p := &paths[r]
		p.n = copy(p.pcs[:], v[6:])
		de.Entries = append(de.Entries, Entry{Rank: r, Seq: uint64(v[1]), Kind: Kind(v[2]), Site: p.Site(), Shape: v[4], hash: v[3]})
	}
	// Where the first two differing paths part (same kind and site at
	// the top, different branches below), for the reader.
	for r := 1; r < len(de.Entries); r++ {
		if de.Entries[r].hash != de.Entries[0].hash && paths[0].n > 0 && paths[r].n > 0 {
			de.Parted = divergence(&paths[0], &paths[r])
			break
		}
	}
	return de
}

// fail turns a backend error into the error the caller sees, marks the
// communicator broken, and ends the flight record.
func (c *checked) fail(ctx, tctx context.Context, id uint64, self Entry, err error) error {
	var bte *TimeoutError
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("comm: %s #%d on group %q rank %d: %w", self.Kind, self.Seq, c.raw.Name(), c.raw.Rank(), err)
	case errors.As(err, &bte), errors.Is(err, ErrCollectiveTimeout), tctx.Err() != nil, errors.Is(err, ErrBroken):
		// The backend's bound (or our own deadline) passed, or a peer
		// gave up on this collective at its bound (in-process the first
		// rank to give up breaks the round for all): either way the
		// collective timed out.
		te := c.timeout(self, bte)
		if bte == nil && !errors.Is(err, context.DeadlineExceeded) {
			te.Cause = err
		}
		err = te
	}
	c.broken = err
	c.cfg.Recorder.End(id, err)
	return err
}

// timeout builds the error of a collective that timed out: the backend's
// own view (bte, when it gave one: which ranks never arrived) with this
// rank's stamp, and every rank's flight records from the stall inspector.
func (c *checked) timeout(self Entry, bte *TimeoutError) *TimeoutError {
	te := &TimeoutError{Group: c.raw.Name(), Self: c.raw.Rank(), Waiting: self}
	if bte != nil {
		te.Missing, te.Cause, te.Bound, te.WorldRanks = slices.Clone(bte.Missing), bte.Cause, bte.Bound, bte.WorldRanks
		te.Peers = bte.Peers
	}
	ins, ok := Unwrap(c.raw).(Inspector)
	if !ok {
		if bte == nil {
			for r := range c.raw.Size() {
				if r != self.Rank {
					te.Missing = append(te.Missing, r)
				}
			}
		}
		return te
	}
	ictx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	te.Peers = ins.InspectPeers(ictx)
	// A rank whose flight records show it entered this collective arrived,
	// if late: the culprit is a rank that never did. Where the backend
	// said who was missing at its bound, keep those of them that still
	// have not arrived (all of them, if that would leave none).
	var never []int
	for _, p := range te.Peers {
		if p.Rank == self.Rank {
			continue
		}
		arrived := false
		for _, r := range p.Records {
			if r.Group == c.raw.Name() && r.Seq >= self.Seq && r.Kind != KindSend && r.Kind != KindRecv {
				arrived = true
				break
			}
		}
		if !arrived && (bte == nil || bte.Missing == nil || slices.Contains(bte.Missing, p.Rank)) {
			never = append(never, p.Rank)
		}
	}
	if len(never) > 0 || bte == nil || bte.Missing == nil {
		te.Missing = never
	}
	return te
}

func (c *checked) end(ctx, tctx context.Context, cancel context.CancelFunc, id uint64, kind Kind, shape int64, err error) error {
	cancel()
	if err != nil {
		return c.fail(ctx, tctx, id, c.entry(kind, shape), err)
	}
	c.cfg.Recorder.End(id, nil)
	return nil
}

func (c *checked) Split(ctx context.Context, color, key int) (Comm, error) {
	var path Path
	path.capture()
	if color < 0 {
		return nil, fmt.Errorf("%w: Split: color %d is negative", ErrBadArgument, color)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id, tctx, cancel, err := c.begin(ctx, KindSplit, 0, &path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	child, err := c.raw.Split(tctx, color, key)
	if err = c.end(ctx, tctx, cancel, id, KindSplit, 0, err); err != nil {
		return nil, err
	}
	return &checked{raw: child, cfg: c.cfg, bounded: c.bounded && TimeoutOf(child) > 0}, nil
}

func (c *checked) Barrier(ctx context.Context) error {
	var path Path
	path.capture()
	c.mu.Lock()
	defer c.mu.Unlock()
	id, tctx, cancel, err := c.begin(ctx, KindBarrier, 0, &path, nil)
	if err != nil {
		cancel()
		return err
	}
	// The exchange synchronised every rank; a barrier needs nothing more.
	return c.end(ctx, tctx, cancel, id, KindBarrier, 0, nil)
}

func (c *checked) AllreduceInt64(ctx context.Context, op ReduceOp, in, out []int64) error {
	var path Path
	path.capture()
	if !op.Valid() {
		return fmt.Errorf("%w: AllreduceInt64: unknown op %v", ErrBadArgument, op)
	}
	if len(in) != len(out) {
		return fmt.Errorf("%w: AllreduceInt64: len(in)=%d != len(out)=%d", ErrBadArgument, len(in), len(out))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	shape := int64(len(in))<<8 | int64(op)
	id, tctx, cancel, err := c.begin(ctx, KindAllreduce, shape, &path, in)
	if err != nil {
		cancel()
		return err
	}
	// The stamps agree, so every contribution has len(in) values and the
	// same op: reduce them here, in rank order, as every rank does.
	copy(out, c.payload(0))
	for r := 1; r < c.raw.Size(); r++ {
		op.Apply(out, c.payload(r))
	}
	return c.end(ctx, tctx, cancel, id, KindAllreduce, shape, nil)
}

func (c *checked) AllgatherInt64s(ctx context.Context, in []int64, out *Gathered) error {
	var path Path
	path.capture()
	if out == nil {
		return fmt.Errorf("%w: AllgatherInt64s: nil output", ErrBadArgument)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id, tctx, cancel, err := c.begin(ctx, KindAllgather, 0, &path, in)
	if err != nil {
		cancel()
		return err
	}
	flat := out.ResetFunc(c.raw.Size(), func(r int) int { return c.gather.Counts[r] - stampLen })
	for r := range c.raw.Size() {
		copy(flat[out.offs[r]:], c.payload(r))
	}
	return c.end(ctx, tctx, cancel, id, KindAllgather, 0, nil)
}

func (c *checked) Bcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	var path Path
	path.capture()
	if root < 0 || root >= c.raw.Size() {
		return nil, fmt.Errorf("%w: Bcast: root %d outside 0..%d", ErrBadArgument, root, c.raw.Size()-1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Root contributes its length and bytes, packed into words; the
	// others only their stamps.
	c.bsend = c.bsend[:0]
	if c.raw.Rank() == root {
		c.bsend = appendBytes(append(c.bsend, int64(len(data))), data)
	}
	id, tctx, cancel, err := c.begin(ctx, KindBcast, int64(root), &path, c.bsend)
	if err != nil {
		cancel()
		return nil, err
	}
	if c.raw.Rank() == root {
		return data, c.end(ctx, tctx, cancel, id, KindBcast, int64(root), nil)
	}
	got, err := unpackBytes(data, c.payload(root))
	if err != nil {
		err = fmt.Errorf("%w: Bcast from root %d: %v", ErrDesync, root, err)
	}
	return got, c.end(ctx, tctx, cancel, id, KindBcast, int64(root), err)
}

// appendBytes packs data into words (8 bytes each, the last zero-padded).
func appendBytes(dst []int64, data []byte) []int64 {
	n := (len(data) + 7) / 8
	dst = slices.Grow(dst, n)
	words := dst[len(dst) : len(dst)+n]
	if n > 0 {
		words[n-1] = 0
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*n), data)
	}
	return dst[:len(dst)+n]
}

// unpackBytes copies the bytes packed in v (its length first) into buf,
// grown when too small.
func unpackBytes(buf []byte, v []int64) ([]byte, error) {
	if len(v) == 0 || v[0] < 0 || (v[0]+7)/8 != int64(len(v)-1) {
		return buf[:0], fmt.Errorf("root's contribution is not a broadcast (%d values)", len(v))
	}
	n := int(v[0])
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if n > 0 {
		copy(buf, unsafe.Slice((*byte)(unsafe.Pointer(&v[1])), 8*(len(v)-1)))
	}
	return buf, nil
}

func (c *checked) Isend(buf []byte, dest, tag int) (Request, error) {
	var path Path
	path.capture()
	req, err := c.raw.Isend(buf, dest, tag)
	if err != nil {
		return nil, err
	}
	id := c.cfg.Recorder.BeginP2PAt(c.raw.Name(), KindSend, dest, tag, &path)
	return &checkedReq{Request: req, rec: c.cfg.Recorder, id: id}, nil
}

func (c *checked) Irecv(buf []byte, src, tag int) (Request, error) {
	var path Path
	path.capture()
	req, err := c.raw.Irecv(buf, src, tag)
	if err != nil {
		return nil, err
	}
	id := c.cfg.Recorder.BeginP2PAt(c.raw.Name(), KindRecv, src, tag, &path)
	return &checkedReq{Request: req, rec: c.cfg.Recorder, id: id}, nil
}

// checkedReq ends the flight record of a point-to-point request when it
// completes.
type checkedReq struct {
	Request
	rec  *Recorder
	id   uint64
	once sync.Once
}

func (r *checkedReq) Test() (Status, bool, error) {
	st, done, err := r.Request.Test()
	if done {
		r.once.Do(func() { r.rec.End(r.id, err) })
	}
	return st, done, err
}

func (r *checkedReq) Wait(ctx context.Context) (Status, error) {
	st, err := r.Request.Wait(ctx)
	if ctx.Err() == nil || err == nil {
		r.once.Do(func() { r.rec.End(r.id, err) })
	}
	return st, err
}

func (r *checkedReq) Cancel() error {
	err := r.Request.Cancel()
	if err == nil {
		r.once.Do(func() { r.rec.End(r.id, errors.New("cancelled")) })
	}
	return err
}

// Notifier is an optional capability of a backend communicator: Notify
// returns a channel that receives a token (buffered, coalesced) whenever a
// point-to-point request posted by this rank completes, so a rank waiting
// for progress can sleep on events instead of polling. Backends without it
// (MPI, where progress needs polling) are polled with a short back-off.
type Notifier interface {
	Notify() <-chan struct{}
}

// NotifierOf returns c's notifier (looking through checked mode), or nil.
func NotifierOf(c Comm) Notifier {
	if n, ok := Unwrap(c).(Notifier); ok {
		return n
	}
	return nil
}
