package flight

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
)

// pathDepth is how many frames a collective's call path keeps: enough to
// reach past the plumbing (checked method, consensus gather, status check,
// executor helper) to the branch of the executor loop that entered it.
const pathDepth = 16

// Path is the call path of a collective or point-to-point operation: the
// return addresses of the frames above the checked method, innermost first,
// as offsets from an anchor in this binary, so that they are equal in every
// process running the same binary (position-independent or not).
type Path struct {
	n   int
	pcs [pathDepth]int64
}

// Hash folds the path into one word for the stamp (FNV-1a over the
// offsets): two ranks at the same collective from different branches of
// their loops differ here even when the immediate caller is the same line.
func (p *Path) Hash() int64 {
	h := uint64(14695981039346656037)
	for _, pc := range p.pcs[:p.n] {
		h ^= uint64(pc)
		h *= 1099511628211
	}
	return int64(h)
}

// plumbing reports whether a frame belongs to the collective plumbing that
// a reader does not care about (packages comm and flight, and the
// consensus gather).
func plumbing(fn string) bool {
	short := fn[strings.LastIndexByte(fn, '/')+1:]
	return strings.HasPrefix(short, "comm.") || strings.HasPrefix(fn, "github.com/rankrun/rankrun/comm/flight.") || strings.HasPrefix(short, "consensus.")
}

// runner reports whether a frame belongs to the code that runs a rank
// (rankrun's backends, launch, explore; Go's runtime and testing): the same
// on every rank, and no part of the program a reader wrote.
func runner(fn string) bool {
	for _, p := range runnerPrefixes {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

var runnerPrefixes = []string{"github.com/rankrun/rankrun/comm/local.", "github.com/rankrun/rankrun/comm/sim.",
	"github.com/rankrun/rankrun/launch.", "github.com/rankrun/rankrun/explore.", "runtime.", "testing."}

// frames resolves the path (slow: only for error messages and snapshots).
func (p *Path) frames() []runtime.Frame {
	if p == nil || p.n == 0 {
		return nil
	}
	pcs := make([]uintptr, p.n)
	for i, off := range p.pcs[:p.n] {
		pcs[i] = uintptr(off + int64(anchor))
	}
	var out []runtime.Frame
	fr := runtime.CallersFrames(pcs)
	for {
		f, more := fr.Next()
		out = append(out, f)
		if !more {
			break
		}
	}
	return out
}

// siteFrames is how many frames outside the plumbing a site names.
const siteFrames = 3

// Site renders the path for a reader: the first frames outside the
// collective plumbing, innermost first ("transceiver/check.go:88 (check) <
// executor/ctx.go:61 (ctxCheck) < executor/ctx.go:40 (run)"), so a status
// check entered from two branches of the executor reads differently.
func (p *Path) Site() string {
	var parts []string
	all := p.frames()
	for _, f := range all {
		if plumbing(f.Function) || runner(f.Function) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s:%d (%s)", shortFile(f.File), f.Line, shortFunc(f.Function)))
		if len(parts) == siteFrames {
			break
		}
	}
	if len(parts) == 0 {
		if len(all) == 0 {
			return "?"
		}
		f := all[0]
		for _, g := range all { // a runner's frame before plumbing's
			if !plumbing(g.Function) {
				f = g
				break
			}
		}
		return fmt.Sprintf("%s:%d (%s)", shortFile(f.File), f.Line, shortFunc(f.Function))
	}
	return strings.Join(parts, " < ")
}

// Full renders every frame of the path outside the collective plumbing,
// innermost first: what tells two entries of one site apart (a failure
// dump compares them).
func (p *Path) Full() string {
	var parts []string
	for _, f := range p.frames() {
		if !plumbing(f.Function) {
			parts = append(parts, fmt.Sprintf("%s:%d (%s)", shortFile(f.File), f.Line, shortFunc(f.Function)))
		}
	}
	return strings.Join(parts, " < ")
}

// Divergence names where two paths part: the first frame (from the
// outermost common one inwards) at which they differ, for a desync message.
func Divergence(a, b *Path) string {
	fa, fb := a.frames(), b.frames()
	i, j := len(fa)-1, len(fb)-1
	for i >= 0 && j >= 0 && fa[i].Function == fb[j].Function && fa[i].Line == fb[j].Line {
		i--
		j--
	}
	at := func(fs []runtime.Frame, k int) string {
		if k < 0 {
			return "(end of path)"
		}
		return fmt.Sprintf("%s:%d (%s)", shortFile(fs[k].File), fs[k].Line, shortFunc(fs[k].Function))
	}
	return at(fa, i) + " vs " + at(fb, j)
}

// Capture fills p with the call path that starts in the caller of the
// function that called Capture (a checked method, which is never inlined:
// it is called through the Comm interface).
//
//go:noinline
func (p *Path) Capture() {
	// Skip the return addresses into Capture and into the checked method.
	p.n = walkFrames(&p.pcs, 2)
	for i := range p.n {
		p.pcs[i] -= int64(anchor)
	}
}

// Inner is the innermost frame of the path (anchored; 0 for an empty
// path): a stamp carries it beside the hash.
func (p *Path) Inner() int64 {
	if p.n == 0 {
		return 0
	}
	return p.pcs[0]
}

// Words is the path as words (anchored return addresses, innermost first),
// at most MaxWords: what a desync's gather carries.
func (p *Path) Words() []int64 { return p.pcs[:p.n] }

// MaxWords is the most words a path has.
const MaxWords = pathDepth

// SetWords makes p the path Words gave (false, and p unchanged, when w
// is longer than MaxWords).
func (p *Path) SetWords(w []int64) bool {
	if len(w) > pathDepth {
		return false
	}
	p.n = copy(p.pcs[:], w)
	return true
}

// anchor is a function entry used to turn call-site program counters into
// offsets that are the same in every process of one binary.
var anchor = reflect.ValueOf(NewRecorder).Pointer()
