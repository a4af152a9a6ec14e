// Guards: the rank-local values a rank's next collective decision depends
// on (DESIGN.md §12). A rank records them cheaply before it decides; they
// ride with its next collective's flight record and, in checked mode, come
// out in the desync or timeout that collective ends in, on every side.

package flight

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"unsafe"
)

// MaxGuards is how many guard values one collective keeps: a decision
// depends on a few values. Past it the oldest are dropped; a name recorded
// twice counts once, with its last value.
const MaxGuards = 8

// GuardValue is one recorded rank-local value.
type GuardValue struct {
	Name  string
	Value int64
	Bool  bool   // the value is a truth value (0 or 1), shown as false or true
	Site  string // where it was recorded: "executor/intake.go:88 (ctxIntake)"
	// Hi, with Varies, is the largest of several ranks' values (Value the
	// smallest): MergeGuards' summary of ranks that recorded different ones.
	Hi     int64
	Varies bool
	// By and Of, when By < Of, say that only By of the Of ranks merged
	// (MergeGuards) recorded this name: the others' decision did not
	// depend on it, or they never reached the point that records it.
	By, Of int
}

// Text renders the value alone: "1", "true", "0..32", "false|true".
func (g GuardValue) Text() string {
	switch {
	case g.Varies && g.Bool:
		return "false|true"
	case g.Varies:
		return strconv.FormatInt(g.Value, 10) + ".." + strconv.FormatInt(g.Hi, 10)
	case g.Bool:
		return strconv.FormatBool(g.Value != 0)
	}
	return strconv.FormatInt(g.Value, 10)
}

// MergeGuards summarises the guard values of several ranks that entered
// the same collective: a name every rank recorded alike keeps its value,
// one they recorded differently shows its range, and one only some of
// them recorded says how many (By of Of). The names are those of the first
// set, then any the others add, in order.
func MergeGuards(sets [][]GuardValue) []GuardValue {
	var out []GuardValue
	at := map[string]int{}
	counted := map[string]int{} // the set a name was last counted in
	for k, set := range sets {
		for _, g := range set {
			i, ok := at[g.Name]
			if !ok {
				at[g.Name], counted[g.Name] = len(out), k
				g.Hi, g.By = g.Value, 1
				out = append(out, g)
				continue
			}
			m := &out[i]
			if c, ok := counted[g.Name]; !ok || c != k {
				counted[g.Name] = k
				m.By++ // once per rank, however often its set names it
			}
			if g.Value < m.Value || g.Value > m.Hi {
				m.Varies = true
				m.Value, m.Hi = min(m.Value, g.Value), max(m.Hi, g.Value)
			}
		}
	}
	for i := range out {
		if out[i].By == len(sets) {
			out[i].By = 0 // every rank recorded it
		} else {
			out[i].Of = len(sets)
		}
	}
	return out
}

// String is "name=value", and "name=value (on 2 of 3 ranks)" for a merged
// value only some ranks recorded.
func (g GuardValue) String() string {
	if g.Of > 0 && g.By < g.Of {
		return fmt.Sprintf("%s=%s (on %d of %d ranks)", g.Name, g.Text(), g.By, g.Of)
	}
	return g.Name + "=" + g.Text()
}

// guardSlot is a guard as the recorder keeps it: no allocation (the name is
// the caller's string, the site an anchored program counter resolved only
// when read).
type guardSlot struct {
	name   string
	v      int64
	isBool bool
	pc     int64 // return address into the recording function, minus anchor
}

// guardSet is a small ring of guard values, recorded without search (a
// name recorded again is resolved when read: its last value counts).
type guardSet struct {
	n int // values recorded (may exceed MaxGuards: the oldest are gone)
	g [MaxGuards]guardSlot
}

// put records one value.
func (s *guardSet) put(g guardSlot) {
	i := s.n
	if i >= MaxGuards {
		i %= MaxGuards
	}
	s.g[i] = g
	s.n++
}

// copyTo copies the set into dst, oldest first, as at most MaxGuards
// values.
func (s *guardSet) copyTo(dst *guardSet) {
	if s.n <= MaxGuards {
		dst.n = copy(dst.g[:], s.g[:s.n])
		return
	}
	k := s.n % MaxGuards
	copy(dst.g[:], s.g[k:])
	copy(dst.g[MaxGuards-k:], s.g[:k])
	dst.n = MaxGuards
}

// sameName compares guard names, constants first by address.
func sameName(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// values resolves the set for a reader: each name once, at its place of
// first record, with its last value.
func (s *guardSet) values() []GuardValue {
	var c guardSet
	s.copyTo(&c)
	if c.n == 0 {
		return nil
	}
	out := make([]GuardValue, 0, c.n)
next:
	for _, g := range c.g[:c.n] {
		v := GuardValue{Name: g.name, Value: g.v, Bool: g.isBool, Site: pcSite(g.pc)}
		for i := range out {
			if sameName(out[i].Name, g.name) {
				out[i] = v
				continue next
			}
		}
		out = append(out, v)
	}
	return out
}

// pcSite names the call at an anchored return address.
func pcSite(off int64) string {
	if off == 0 {
		return ""
	}
	f, _ := runtime.CallersFrames([]uintptr{uintptr(off + int64(anchor))}).Next()
	if f.Function == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d (%s)", shortFile(f.File), f.Line, shortFunc(f.Function))
}

// Guard records a rank-local value that the rank's next collective decision
// depends on ("fits", 1): it is kept with the next collective this rank
// enters on any of its communicators, and named if that collective fails.
// A no-op on a nil recorder. It takes no lock and does not allocate, so it
// belongs to one goroutine: the one that begins this rank's operations, on
// every communicator that shares the recorder. While a rank records guards
// no other goroutine of it may begin one (they read the set it writes).
// Other goroutines see the values (Pending) as of that goroutine's last
// point-to-point post or Publish.
//
//go:noinline
func (r *Recorder) Guard(name string, v int64) {
	if r != nil {
		r.guard(guardSlot{name: name, v: v, pc: callerRetN(1)})
	}
}

// GuardBool is Guard for a truth value ("busy", true).
//
//go:noinline
func (r *Recorder) GuardBool(name string, b bool) {
	if r != nil {
		v := int64(0)
		if b {
			v = 1
		}
		r.guard(guardSlot{name: name, v: v, isBool: true, pc: callerRetN(1)})
	}
}

// GuardCaller is Guard recording the site of its caller's caller: for a
// helper that records on behalf of the decision point that called it (the
// helper must not be inlined: mark it //go:noinline).
//
//go:noinline
func (r *Recorder) GuardCaller(name string, v int64) {
	if r != nil {
		r.guard(guardSlot{name: name, v: v, pc: callerRetN(2)})
	}
}

// GuardBoolCaller is GuardBool recording its caller's caller's site.
//
//go:noinline
func (r *Recorder) GuardBoolCaller(name string, b bool) {
	if r != nil {
		v := int64(0)
		if b {
			v = 1
		}
		r.guard(guardSlot{name: name, v: v, isBool: true, pc: callerRetN(2)})
	}
}

// guard records one value. The pending set belongs to the rank's own
// goroutine (the one that enters its collectives and posts its
// point-to-point operations): recording takes no lock. The recorder
// publishes it, under its lock, when that goroutine begins an operation
// (and clears it when a collective takes it), which is where other
// goroutines (a stall inspector) read it.
func (r *Recorder) guard(g guardSlot) { r.pending.put(g) }

// Value is one guard value for Guards: a name, a value, and whether it is
// a truth value.
type Value struct {
	Name string
	V    int64
	Bool bool
}

// B is a truth value as a Value's V.
func B(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Guards records several guard values at one decision point, all at the
// caller's site (one frame walk for all of them).
//
//go:noinline
func (r *Recorder) Guards(vs ...Value) {
	if r != nil {
		r.guards(callerRetN(1), vs)
	}
}

// GuardsCaller is Guards recording its caller's caller's site (see
// GuardCaller).
//
//go:noinline
func (r *Recorder) GuardsCaller(vs ...Value) {
	if r != nil {
		r.guards(callerRetN(2), vs)
	}
}

func (r *Recorder) guards(pc int64, vs []Value) {
	s := r.pending
	for i := range vs {
		j := s.n
		if j >= MaxGuards {
			j %= MaxGuards
		}
		g := &s.g[j]
		g.name, g.v, g.isBool, g.pc = vs[i].Name, vs[i].V, vs[i].Bool, pc
		s.n++
	}
}

// Pending returns the guard values the rank recorded since its last
// collective began, as of the last operation it began (safe from any
// goroutine): what kept it from the next collective, for a stall
// inspector.
func (r *Recorder) Pending() []GuardValue {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	s := r.published
	r.mu.Unlock()
	return s.values()
}

// Publish makes the guards recorded so far visible to Pending: the rank's
// own goroutine calls it before it reports its state (a failure dump).
func (r *Recorder) Publish() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.pending.copyTo(&r.published)
	r.mu.Unlock()
}

// GuardsAt returns the guard values kept with operation id (what Begin
// returned), resolved: none when it has left the ring.
func (r *Recorder) GuardsAt(id uint64) []GuardValue {
	s := r.guardsOf(id)
	return s.values()
}

// AppendGuards packs the guard values kept with operation id into words
// (a desync's gather carries them; ParseGuards reads them back).
func (r *Recorder) AppendGuards(dst []int64, id uint64) []int64 {
	s := r.guardsOf(id)
	return appendGuards(dst, &s)
}

// guardsOf returns the guards kept with operation id, unresolved (nil when
// it has left the ring).
func (r *Recorder) guardsOf(id uint64) guardSet {
	if r == nil {
		return guardSet{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := &r.ring[id%uint64(len(r.ring))]; s.gen == id && s.guards != nil {
		return *s.guards
	}
	return guardSet{}
}

// GuardsText renders guard values for a message: "fits=1, busy=true at
// executor/intake.go:88 (ctxIntake)" (each distinct site once, after the
// values recorded there); "" for none.
func GuardsText(gs []GuardValue) string {
	if len(gs) == 0 {
		return ""
	}
	var parts []string
	var vals []string
	site := gs[0].Site
	flush := func() {
		p := strings.Join(vals, ", ")
		if site != "" {
			p += " at " + site
		}
		parts = append(parts, p)
		vals = vals[:0]
	}
	for _, g := range gs {
		if g.Site != site {
			flush()
			site = g.Site
		}
		vals = append(vals, g.String())
	}
	flush()
	return strings.Join(parts, "; ")
}

// appendGuards packs a guard set into words for a desync's gather:
// count, then per guard value, isBool, pc, name length, name bytes.
func appendGuards(dst []int64, set *guardSet) []int64 {
	var s guardSet
	set.copyTo(&s)
	dst = append(dst, int64(s.n))
	for _, g := range s.g[:s.n] {
		b := int64(0)
		if g.isBool {
			b = 1
		}
		dst = append(dst, g.v, b, g.pc, int64(len(g.name)))
		dst = appendName(dst, g.name)
	}
	return dst
}

// ParseGuards reads what AppendGuards packed, returning the values and the
// words after them, or ok false when v is not such a packing.
func ParseGuards(v []int64) (out []GuardValue, rest []int64, ok bool) {
	if len(v) < 1 || v[0] < 0 || v[0] > MaxGuards {
		return nil, v, false
	}
	n := int(v[0])
	v = v[1:]
	for range n {
		if len(v) < 4 || v[3] < 0 || v[3] > 1<<10 {
			return nil, v, false
		}
		words := int((v[3] + 7) / 8)
		if len(v) < 4+words {
			return nil, v, false
		}
		name := unpackName(v[4:4+words], int(v[3]))
		out = append(out, GuardValue{Name: name, Value: v[0], Bool: v[1] != 0, Site: pcSite(v[2])})
		v = v[4+words:]
	}
	return out, v, true
}

// appendName packs a name into words, 8 bytes each, the last zero-padded.
func appendName(dst []int64, name string) []int64 {
	for i := 0; i < len(name); i += 8 {
		var w [8]byte
		copy(w[:], name[i:])
		dst = append(dst, int64(binary.LittleEndian.Uint64(w[:])))
	}
	return dst
}

// unpackName reads n bytes of a name appendName packed into words.
func unpackName(words []int64, n int) string {
	b := make([]byte, 0, len(words)*8)
	for _, w := range words {
		b = binary.LittleEndian.AppendUint64(b, uint64(w))
	}
	return string(b[:n])
}
