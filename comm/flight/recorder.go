// Package flight is a rank's flight recorder: the ring of its last
// operations on every communicator (Recorder, OpRecord), each with its
// kind (Kind), call path (Path) and the guard values recorded before it
// (GuardValue: the rank-local values its next collective decision depends
// on). comm's checked mode records every operation here and names the call
// paths and guards in the errors it returns; the stall inspector and the
// failure dumps read the snapshots. It knows nothing of communicators: it
// imports no rankrun package but clock.
package flight

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/rankrun/rankrun/clock"
)

// Kind names an operation in stamps and flight records.
type Kind uint8

// Operation kinds.
const (
	KindBarrier Kind = iota + 1
	KindAllreduce
	KindAllgather
	KindBcast
	KindSplit
	KindSend
	KindRecv
)

// The operation kinds of the typed collectives (comm.Reduce, comm.Gather, ...).
const (
	KindReduce Kind = KindRecv + 1 + iota
	KindGather
	KindScatter
	KindAlltoall
	KindReduceScatter
)

func (k Kind) String() string {
	switch k {
	case KindBarrier:
		return "Barrier"
	case KindAllreduce:
		return "Allreduce"
	case KindAllgather:
		return "Allgather"
	case KindBcast:
		return "Bcast"
	case KindSplit:
		return "Split"
	case KindSend:
		return "Isend"
	case KindRecv:
		return "Irecv"
	case KindReduce:
		return "Reduce"
	case KindGather:
		return "Gather"
	case KindScatter:
		return "Scatter"
	case KindAlltoall:
		return "Alltoall"
	case KindReduceScatter:
		return "ReduceScatter"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// OpRecord is one entry of a flight recorder.
type OpRecord struct {
	Group string
	Seq   uint64 // collective sequence number on Group (0 for point-to-point)
	Kind  Kind
	Site  string // the call path outside the collective plumbing
	// Path is the whole call path outside the plumbing (Site is its
	// first frames): two entries of one site from different branches
	// differ here.
	Path  string
	Peer  int // point-to-point: the other rank (-1 for collectives)
	Tag   int // point-to-point: the tag
	Start time.Time
	End   time.Time // zero while the operation is in progress
	Err   string    // non-empty when the operation failed
	// Guards are the guard values the rank recorded before it entered
	// this collective (see Recorder.Guard).
	Guards []GuardValue
}

// InProgress reports whether the operation had not finished when recorded.
func (r OpRecord) InProgress() bool { return r.End.IsZero() }

func (r OpRecord) String() string {
	state := "in progress"
	if !r.InProgress() {
		state = "done in " + r.End.Sub(r.Start).String()
	}
	if r.Err != "" {
		state = "failed: " + r.Err
	}
	if r.Kind == KindSend || r.Kind == KindRecv {
		return fmt.Sprintf("%s peer %d tag %d on %s at %s, %s", r.Kind, r.Peer, r.Tag, r.Group, r.Site, state)
	}
	after := ""
	if len(r.Guards) > 0 {
		after = " after " + GuardsText(r.Guards)
	}
	return fmt.Sprintf("%s #%d on %s at %s%s, %s", r.Kind, r.Seq, r.Group, r.Site, after, state)
}

// DefaultRecorderDepth is how many operations a Recorder keeps by default.
const DefaultRecorderDepth = 64

type slot struct {
	group  string
	seq    uint64
	kind   Kind
	path   Path
	peer   int
	tag    int
	start  time.Duration // since the recorder's base (one monotonic read)
	end    time.Duration
	done   bool
	err    string
	gen    uint64
	guards *guardSet // recorded before a collective began (swapped in, not copied; nil: none yet)
}

// Recorder is a rank's flight recorder: a ring of its last operations across
// all of its communicators. Recording does not allocate once each slot of
// the ring has held an operation with guards (its guard set is recycled
// from then on); call sites are resolved only when a snapshot is taken.
// Safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	clk  clock.Clock
	base time.Time // slots hold times as offsets from it
	ring []slot
	next uint64 // total operations begun
	// pending are the guards recorded since the last collective began,
	// owned by the rank's goroutine (guard.go); published is their copy
	// as of the last operation it began, under mu.
	pending   *guardSet
	published guardSet
}

// NewRecorder returns a recorder on the real clock that keeps the last
// depth operations (DefaultRecorderDepth when depth <= 0).
func NewRecorder(depth int) *Recorder { return NewRecorderOn(depth, nil) }

// NewRecorderOn is NewRecorder timing operations on clk (the real clock
// when nil): a simulated world records virtual times.
func NewRecorderOn(depth int, clk clock.Clock) *Recorder {
	if depth <= 0 {
		depth = DefaultRecorderDepth
	}
	c := clock.Or(clk)
	// A slot's guard set comes the first time an operation with guards
	// takes it (a rank of 4096 in a simulated world keeps only what it
	// records).
	return &Recorder{ring: make([]slot, depth), clk: c, base: c.Now(), pending: &guardSet{}}
}

// Begin records the start of an operation and returns a handle for End.
func (r *Recorder) Begin(group string, seq uint64, kind Kind, pc uintptr) uint64 {
	p := pathOf(pc)
	return r.BeginAt(group, seq, kind, &p)
}

// pathOf is the one-frame path of a program counter (0: none).
func pathOf(pc uintptr) Path {
	if pc == 0 {
		return Path{}
	}
	return Path{n: 1, pcs: [pathDepth]int64{int64(pc) + 1 - int64(anchor)}}
}

// BeginAt records the start of a collective entered along path.
func (r *Recorder) BeginAt(group string, seq uint64, kind Kind, path *Path) uint64 {
	if r == nil {
		return 0
	}
	now := r.since()
	r.mu.Lock()
	id := r.next
	r.next++
	sl := &r.ring[id%uint64(len(r.ring))]
	sl.group, sl.seq, sl.kind, sl.path, sl.peer, sl.tag, sl.start, sl.end, sl.done, sl.err, sl.gen = group, seq, kind, *path, -1, 0, now, 0, false, "", id
	// The pending set becomes the record's; the record's old set, free
	// now that its operation left the ring, collects the next guards.
	if r.pending.n > 0 {
		old := sl.guards
		if old == nil {
			old = new(guardSet)
		}
		sl.guards, r.pending = r.pending, old
	} else if sl.guards != nil {
		sl.guards.n = 0
	}
	r.pending.n, r.published.n = 0, 0
	r.mu.Unlock()
	return id
}

// BeginP2P records the posting of a point-to-point operation.
func (r *Recorder) BeginP2P(group string, kind Kind, peer, tag int, pc uintptr) uint64 {
	p := pathOf(pc)
	return r.BeginP2PAt(group, kind, peer, tag, &p)
}

// BeginP2PAt records the posting of a point-to-point operation along path.
func (r *Recorder) BeginP2PAt(group string, kind Kind, peer, tag int, path *Path) uint64 {
	if r == nil {
		return 0
	}
	now := r.since()
	r.mu.Lock()
	id := r.next
	r.next++
	sl := &r.ring[id%uint64(len(r.ring))]
	sl.group, sl.seq, sl.kind, sl.path, sl.peer, sl.tag, sl.start, sl.end, sl.done, sl.err, sl.gen = group, 0, kind, *path, peer, tag, now, 0, false, "", id
	if sl.guards != nil {
		sl.guards.n = 0 // a point-to-point operation keeps no guards
	}
	// A point-to-point wait may be where the rank stays: what it recorded
	// since its last collective becomes visible to a stall inspector.
	r.pending.copyTo(&r.published)
	r.mu.Unlock()
	return id
}

// End records the end of the operation begun as id (a no-op when it has
// already been pushed out of the ring).
func (r *Recorder) End(id uint64, err error) {
	if r == nil {
		return
	}
	now := r.since()
	r.mu.Lock()
	s := &r.ring[id%uint64(len(r.ring))]
	if s.gen == id {
		s.end, s.done = now, true
		if err != nil {
			s.err = err.Error()
		}
	}
	r.mu.Unlock()
}

// since is the time since the recorder's base.
func (r *Recorder) since() time.Duration { return clock.Since(r.clk, r.base) }

// Snapshot returns the recorded operations, oldest first.
func (r *Recorder) Snapshot() []OpRecord {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	n := min(r.next, uint64(len(r.ring)))
	slots := make([]slot, 0, n)
	guards := make([]guardSet, 0, n) // copied here: a set is recycled once its record leaves the ring
	for i := r.next - n; i < r.next; i++ {
		sl := r.ring[i%uint64(len(r.ring))]
		slots = append(slots, sl)
		var g guardSet
		if sl.guards != nil {
			g = *sl.guards
		}
		guards = append(guards, g)
	}
	r.mu.Unlock()
	out := make([]OpRecord, len(slots))
	for i, s := range slots {
		out[i] = OpRecord{Group: s.group, Seq: s.seq, Kind: s.kind, Site: s.path.Site(), Path: s.path.Full(),
			Peer: s.peer, Tag: s.tag, Start: r.base.Add(s.start), Err: s.err, Guards: guards[i].values()}
		if s.done {
			out[i].End = r.base.Add(s.end)
		}
	}
	return out
}

// SiteString renders a program counter as file:line (function).
func SiteString(pc uintptr) string {
	if pc == 0 {
		return "?"
	}
	fn := runtime.FuncForPC(pc)
	if fn == nil {
		return fmt.Sprintf("pc=%#x", pc)
	}
	file, line := fn.FileLine(pc)
	return fmt.Sprintf("%s:%d (%s)", shortFile(file), line, shortFunc(fn.Name()))
}

func shortFile(f string) string {
	// Keep the last two path elements: "consensus/gather.go".
	n := 0
	for i := len(f) - 1; i >= 0; i-- {
		if f[i] == '/' {
			n++
			if n == 2 {
				return f[i+1:]
			}
		}
	}
	return f
}

func shortFunc(f string) string {
	for i := len(f) - 1; i >= 0; i-- {
		if f[i] == '/' {
			return f[i+1:]
		}
	}
	return f
}
