package comm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/kit"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// DefaultCollectiveTimeout bounds a checked collective when CheckConfig
// leaves Timeout zero.
const DefaultCollectiveTimeout = 30 * time.Second

// inspectTimeout bounds how long the stall inspector waits for peers.
const inspectTimeout = 2 * time.Second

// CheckConfig configures checked mode.
type CheckConfig struct {
	// Timeout bounds every collective (DefaultCollectiveTimeout when 0)
	// over a backend that does not bound its collectives itself (see
	// boundedComm); over one that does, the backend's bound applies.
	Timeout time.Duration
	// Recorder is this rank's flight recorder; the backend's inspector
	// must return the same records for this rank.
	Recorder *flight.Recorder
	// AnySite lets collectives entered from different call paths pair up:
	// the stamps then compare sequence, kind and shape (datatype,
	// reduction, root, counts) only. By default the call paths must agree
	// too, which catches a rank that reaches the right kind of collective
	// by the wrong road, but rejects the MPI habit of
	// `if rank == root { Bcast(...) } else { Bcast(...) }`. A desync report
	// names every rank's call site either way.
	AnySite bool
}

// stampLen is the number of int64s in a stamp: magic, sequence number,
// kind, call-path hash, innermost call site, argument shape.
const stampLen = 6

const stampMagic = 0x52524e // "RRN"

type checked struct {
	raw     Comm
	stamper stampComparer // raw's, when it compares stamps in its rounds
	cfg     CheckConfig
	bounded bool       // the backend bounds its collectives (boundedComm)
	mu      sync.Mutex // serialises collectives so seq matches call order
	seq     uint64
	broken  error
	path    flight.Path // of the collective in progress
	cur     uint64      // its flight-record id
	stamp   [stampLen]int64
	send    []int64  // stamp, then payload: the one backend collective's input
	bsend   []int64  // Bcast: root's length and bytes as words
	gather  Gathered // every rank's stamp and payload
	pairBuf []int64  // a typed collective's count sums, or counts (pairUp)
	gbuf    []int64
}

// NewChecked wraps raw in checked mode (see the package doc). Children from
// Split are checked too, with the same configuration.
//
// Over a boundedComm backend the backend's bound applies, unless cfg.Timeout
// asks for a shorter one: then checked mode bounds each collective itself.
func NewChecked(raw Comm, cfg CheckConfig) Comm {
	return &checked{raw: raw, cfg: cfg.filled(), bounded: cfg.backendBounds(raw), stamper: stamperOf(raw)}
}

func (cfg CheckConfig) filled() CheckConfig {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultCollectiveTimeout
	}
	return cfg
}

// backendBounds reports whether raw's own bound is the one that applies.
func (cfg CheckConfig) backendBounds(raw Comm) bool {
	b := timeoutOf(raw)
	return b > 0 && (cfg.Timeout <= 0 || cfg.Timeout >= b)
}

// Unwrap implements wrapper.
func (c *checked) Unwrap() Comm { return c.raw }

func (c *checked) Rank() int    { return c.raw.Rank() }
func (c *checked) Size() int    { return c.raw.Size() }
func (c *checked) Name() string { return c.raw.Name() }
func (c *checked) Close() error { return c.raw.Close() }

// noCancel is the cancel function of a collective that needs no deadline
// of its own (a boundedComm backend bounds it).
func noCancel() {}

// entry is this rank's view of the collective in progress, for errors.
func (c *checked) entry(kind flight.Kind, shape int64) Entry {
	return Entry{Rank: c.raw.Rank(), Seq: c.seq, Kind: kind, Site: c.path.Site(), Shape: shape, Guards: c.cfg.Recorder.GuardsAt(c.cur)}
}

// begin runs the one backend collective of a checked collective of kind
// with shape, whose call path the exported method captured into path:
// every rank contributes its stamp followed by payload, through
// AllgatherInt64s, and every rank checks that all stamps agree. Whatever
// collective each rank is in, they all pair the same backend operation, so
// a desync is seen (and named), never misread. It returns the flight-record
// id and the context of the operation; the contributions are in c.gather,
// each after its stamp. The caller holds c.mu.
func (c *checked) begin(ctx context.Context, kind flight.Kind, shape int64, path *flight.Path, payload []int64) (uint64, context.Context, context.CancelFunc, error) {
	if c.broken != nil {
		return 0, ctx, noCancel, fmt.Errorf("%w (group %q, rank %d): %w", ErrBroken, c.raw.Name(), c.raw.Rank(), c.broken)
	}
	c.seq++
	c.path = *path
	id := c.cfg.Recorder.BeginAt(c.raw.Name(), c.seq, kind, &c.path)
	c.cur = id
	tctx, cancel := ctx, context.CancelFunc(noCancel)
	if !c.bounded {
		tctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout+kit.GraceOf(ctx))
	}
	inner, hash := int64(0), int64(0)
	if !c.cfg.AnySite {
		hash, inner = c.path.Hash(), c.path.Inner()
	}
	c.stamp = [stampLen]int64{stampMagic, int64(c.seq), int64(kind), hash, inner, shape}
	s := c.stamp
	if c.stamper != nil {
		// The caller's own backend collective carries the stamp.
		c.stamper.SetStamp(c.stamp[:])
		return id, tctx, cancel, nil
	}
	c.send = append(append(c.send[:0], s[:]...), payload...)
	c.gather.readOnly = true // read here and copied out: a backend may share it
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
	if v := c.gather.agreed; v != nil {
		// A result the backend shares among the members (the simulator's
		// large groups): one member's look is every member's.
		if !v.known {
			v.known, v.agree = true, c.compareStamps()
		}
		return v.agree
	}
	return c.compareStamps()
}

// compareStamps is stampsAgree's comparison.
func (c *checked) compareStamps() bool {
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

// stampedEnd finishes a collective whose stamp rode the backend's round
// (c.stamper): err is the backend call's; stamps that differ are a desync,
// named on every rank alike (they all saw the same stamps).
func (c *checked) stampedEnd(ctx, tctx context.Context, cancel context.CancelFunc, id uint64, kind flight.Kind, shape int64, err error) error {
	if err == nil && !c.stamper.StampsAgreed() {
		err = c.desync(tctx, c.stamp)
		cancel()
		c.broken = err
		c.cfg.Recorder.End(id, err)
		return err
	}
	return c.end(ctx, tctx, cancel, id, kind, shape, err)
}

// payload is rank r's contribution after its stamp.
func (c *checked) payload(r int) []int64 { return c.gather.Of(r)[stampLen:] }

func (c *checked) end(ctx, tctx context.Context, cancel context.CancelFunc, id uint64, kind flight.Kind, shape int64, err error) error {
	cancel()
	if err != nil {
		return c.fail(ctx, tctx, id, c.entry(kind, shape), err)
	}
	c.cfg.Recorder.End(id, nil)
	return nil
}

func (c *checked) Split(ctx context.Context, color, key int) (Comm, error) {
	var path flight.Path
	path.Capture()
	if color < 0 {
		return nil, fmt.Errorf("%w: Split: color %d is negative", ErrBadArgument, color)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id, tctx, cancel, err := c.begin(ctx, flight.KindSplit, 0, &path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	if c.stamper != nil {
		// A stamped barrier first: a Split round combines no stamps.
		if err := c.raw.Barrier(tctx); err != nil || !c.stamper.StampsAgreed() {
			return nil, c.stampedEnd(ctx, tctx, cancel, id, flight.KindSplit, 0, err)
		}
	}
	child, err := c.raw.Split(tctx, color, key)
	if err = c.end(ctx, tctx, cancel, id, flight.KindSplit, 0, err); err != nil {
		return nil, err
	}
	return &checked{raw: child, cfg: c.cfg, bounded: c.bounded && timeoutOf(child) > 0, stamper: stamperOf(child)}, nil
}

func (c *checked) Barrier(ctx context.Context) error {
	var path flight.Path
	path.Capture()
	c.mu.Lock()
	defer c.mu.Unlock()
	id, tctx, cancel, err := c.begin(ctx, flight.KindBarrier, 0, &path, nil)
	if err != nil {
		cancel()
		return err
	}
	if c.stamper != nil {
		return c.stampedEnd(ctx, tctx, cancel, id, flight.KindBarrier, 0, c.raw.Barrier(tctx))
	}
	// The exchange synchronised every rank; a barrier needs nothing more.
	return c.end(ctx, tctx, cancel, id, flight.KindBarrier, 0, nil)
}

func (c *checked) AllreduceInt64(ctx context.Context, op ReduceOp, in, out []int64) error {
	var path flight.Path
	path.Capture()
	if !typed.Valid(op) {
		return fmt.Errorf("%w: AllreduceInt64: unknown op %v", ErrBadArgument, op)
	}
	if len(in) != len(out) {
		return fmt.Errorf("%w: AllreduceInt64: len(in)=%d != len(out)=%d", ErrBadArgument, len(in), len(out))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	shape := int64(len(in))<<8 | int64(op)
	id, tctx, cancel, err := c.begin(ctx, flight.KindAllreduce, shape, &path, in)
	if err != nil {
		cancel()
		return err
	}
	if c.stamper != nil {
		return c.stampedEnd(ctx, tctx, cancel, id, flight.KindAllreduce, shape, c.raw.AllreduceInt64(tctx, op, in, out))
	}
	// The stamps agree, so every contribution has len(in) values and the
	// same op: reduce them here, in rank order, as every rank does.
	copy(out, c.payload(0))
	for r := 1; r < c.raw.Size(); r++ {
		typed.Apply(op, out, c.payload(r))
	}
	return c.end(ctx, tctx, cancel, id, flight.KindAllreduce, shape, nil)
}

func (c *checked) AllgatherInt64s(ctx context.Context, in []int64, out *Gathered) error {
	var path flight.Path
	path.Capture()
	if out == nil {
		return fmt.Errorf("%w: AllgatherInt64s: nil output", ErrBadArgument)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id, tctx, cancel, err := c.begin(ctx, flight.KindAllgather, 0, &path, in)
	if err != nil {
		cancel()
		return err
	}
	if c.stamper != nil {
		return c.stampedEnd(ctx, tctx, cancel, id, flight.KindAllgather, 0, c.raw.AllgatherInt64s(tctx, in, out))
	}
	flat := out.ResetFunc(c.raw.Size(), func(r int) int { return c.gather.Counts[r] - stampLen })
	for r := range c.raw.Size() {
		copy(flat[out.offs[r]:], c.payload(r))
	}
	return c.end(ctx, tctx, cancel, id, flight.KindAllgather, 0, nil)
}

func (c *checked) Bcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	var path flight.Path
	path.Capture()
	if root < 0 || root >= c.raw.Size() {
		return nil, fmt.Errorf("%w: Bcast: root %d outside 0..%d", ErrBadArgument, root, c.raw.Size()-1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Root contributes its length and bytes, packed into words; the
	// others only their stamps.
	c.bsend = c.bsend[:0]
	if c.raw.Rank() == root && c.stamper == nil {
		c.bsend = appendBytes(append(c.bsend, int64(len(data))), data)
	}
	id, tctx, cancel, err := c.begin(ctx, flight.KindBcast, int64(root), &path, c.bsend)
	if err != nil {
		cancel()
		return nil, err
	}
	if c.stamper != nil {
		got, err := c.raw.Bcast(tctx, root, data)
		return got, c.stampedEnd(ctx, tctx, cancel, id, flight.KindBcast, int64(root), err)
	}
	if c.raw.Rank() == root {
		return data, c.end(ctx, tctx, cancel, id, flight.KindBcast, int64(root), nil)
	}
	got, err := unpackBytes(data, c.payload(root))
	if err != nil {
		err = fmt.Errorf("%w: Bcast from root %d: %v", ErrDesync, root, err)
	}
	return got, c.end(ctx, tctx, cancel, id, flight.KindBcast, int64(root), err)
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
