package explore

// What a schedule that stopped stepping is doing. A snapshot of the
// process's goroutines (runtime.Stack), narrowed to the ones its run
// started, tells a run that cannot move (each of its goroutines waits on
// another, a timer or I/O) from one that is still working, or waiting for
// a CPU on a loaded host (one of them runs or is runnable). Only the first
// is a verdict the program earned; the second is the host's.

import (
	"runtime"
	"strconv"
	"strings"
	"time"
)

// goroutine is one record of a goroutine dump.
type goroutine struct {
	id, parent uint64 // parent: the goroutine that created it (0: none named)
	state      string // the wait reason or status, without its duration: "chan receive", "runnable"
	stack      string // the whole record, header first
}

// waits are the states a goroutine leaves only when another goroutine
// acts, a timer fires or I/O arrives: a run whose goroutines all sit in
// them cannot move by itself. Any other state (running, runnable, in a
// syscall, assisting the collector, preempted) is work under way.
var waits = map[string]bool{
	"chan receive": true, "chan send": true, "chan receive (nil chan)": true, "chan send (nil chan)": true,
	"select": true, "select (no cases)": true, "semacquire": true, "sleep": true, "IO wait": true,
	"sync.Cond.Wait": true, "sync.Mutex.Lock": true, "sync.RWMutex.RLock": true, "sync.RWMutex.Lock": true,
	"sync.WaitGroup.Wait": true, "coroutine": true,
}

// canRun: g is working or waits only for a CPU.
func (g goroutine) canRun() bool { return !waits[g.state] }

// goroutines is a snapshot of every goroutine in the process.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return parseGoroutines(string(buf[:n]))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// parseGoroutines reads a runtime.Stack dump: records apart by a blank
// line, each headed "goroutine ID [STATE, ...]:" (extra fields before the
// bracket under GOTRACEBACK=system) and ending, for all but the first,
// "created by F in goroutine PARENT".
func parseGoroutines(dump string) []goroutine {
	var gs []goroutine
	for _, rec := range strings.Split(strings.TrimSpace(dump), "\n\n") {
		header, rest, _ := strings.Cut(rec, "\n")
		fields := strings.Fields(strings.TrimPrefix(header, "goroutine "))
		if !strings.HasPrefix(header, "goroutine ") || len(fields) == 0 {
			continue
		}
		id, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		g := goroutine{id: id, stack: rec}
		if _, s, ok := strings.Cut(header, "["); ok {
			s, _, _ = strings.Cut(s, "]")
			s, _, _ = strings.Cut(s, ", ")
			// Marks the runtime appends to a state: in a synctest bubble,
			// detected as leaked, being scanned by the collector.
			for _, mark := range []string{" (durable)", " (leaked)", " (scan)"} {
				s = strings.TrimSuffix(s, mark)
			}
			g.state = s
		}
		for _, line := range strings.Split(rest, "\n") {
			if _, p, ok := strings.Cut(line, " in goroutine "); ok && strings.HasPrefix(line, "created by ") {
				g.parent, _ = strconv.ParseUint(strings.TrimSpace(p), 10, 64)
			}
		}
		gs = append(gs, g)
	}
	return gs
}

// currentID is the calling goroutine's id.
func currentID() uint64 {
	var buf [64]byte
	header := string(buf[:runtime.Stack(buf[:], false)])
	fields := strings.Fields(strings.TrimPrefix(header, "goroutine "))
	if len(fields) == 0 {
		return 0
	}
	id, _ := strconv.ParseUint(fields[0], 10, 64)
	return id
}

// family is root and every live goroutine it started, directly or
// through others still alive (one whose creator has returned is lost to
// it: the dump names only the creator's id; see orphans).
func family(gs []goroutine, root uint64) []goroutine {
	if root == 0 {
		return nil
	}
	in := map[uint64]bool{root: true}
	for grew := true; grew; {
		grew = false
		for _, g := range gs {
			if !in[g.id] && in[g.parent] {
				in[g.id], grew = true, true
			}
		}
	}
	var out []goroutine
	for _, g := range gs {
		if in[g.id] {
			out = append(out, g)
		}
	}
	return out
}

// orphans are the goroutines whose creator has returned, and theirs: a
// rank's helper started by a launcher goroutine that returned is one.
// Whether one belongs to the run cannot be told (ids are handed out in
// batches per processor, so not even its age), so they may delay a
// verdict (while one of them runs) but never make one.
func orphans(gs []goroutine) []goroutine {
	live := map[uint64]bool{}
	for _, g := range gs {
		live[g.id] = true
	}
	var out []goroutine
	for _, g := range gs {
		if g.parent != 0 && !live[g.parent] {
			out = append(out, family(gs, g.id)...)
		}
	}
	return out
}

// liveIDs is the set of every goroutine's id now.
func liveIDs() map[uint64]bool {
	ids := map[uint64]bool{}
	for _, g := range goroutines() {
		ids[g.id] = true
	}
	return ids
}

// leaked is every goroutine that was not live in before and has not
// ended, and that the caller's run may have started: one descended from
// the caller (through goroutines still alive), or whose creator has
// returned (a rank's helper, once its rank returned: whose it was cannot
// be told). One descended from another goroutine of before is not the
// run's: a test running in parallel started it. Goroutines the standard
// library starts for itself (signal delivery) and parked test runners are
// not the run's either.
//
// The run has returned, so those it left either wind down or wait. While
// one of them can run (it is ending, or about to wake one that waits on
// it) leaked yields to them and looks again; once every one waits (on a
// channel, a lock, a timer), none can end by itself and they are the
// verdict, decided by their states, not by the host's speed. One that
// keeps running past spin is named too, as awaitRun names a rank that
// spins.
func leaked(before map[uint64]bool, spin time.Duration) []goroutine {
	self := currentID()
	start := time.Now()
	for {
		gs := goroutines()
		live := make(map[uint64]goroutine, len(gs))
		for _, g := range gs {
			live[g.id] = g
		}
		var left []goroutine
		running := false
		for _, g := range gs {
			if !before[g.id] && g.id != self && !background(g) && ours(g, live, before, self) {
				left = append(left, g)
				running = running || g.canRun()
			}
		}
		if !running || time.Since(start) > spin {
			return left
		}
		runtime.Gosched()
	}
}

// ours: g descends from self through live goroutines, or its line of
// creators breaks at one that has returned, rather than reaching another
// goroutine of before.
func ours(g goroutine, live map[uint64]goroutine, before map[uint64]bool, self uint64) bool {
	for seen := 0; seen <= len(live); seen++ { // a cycle cannot be, but bound the walk
		p := g.parent
		switch {
		case p == self || p == 0:
			return true
		case before[p]:
			return false
		}
		next, ok := live[p]
		if !ok {
			return true // its creator returned
		}
		g = next
	}
	return true
}

// background: g is one the standard library or the test runner keeps for
// itself, not a program's.
func background(g goroutine) bool {
	_, frames, _ := strings.Cut(g.stack, "\n")
	switch g.top() {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runTests":
		return true
	}
	return strings.Contains(frames, "os/signal.signal_recv") || strings.Contains(frames, "os/signal.loop")
}

// describe is g's header and the function it is in: "goroutine 7 [chan
// receive]: main.worker".
func (g goroutine) describe() string {
	header, _, _ := strings.Cut(g.stack, "\n")
	return header + " " + g.top()
}

// top is the function g is in: "testing.(*T).Run" (a frame's line ends
// with its arguments in parentheses, which hold none of their own).
func (g goroutine) top() string {
	_, frames, _ := strings.Cut(g.stack, "\n")
	line, _, _ := strings.Cut(frames, "\n")
	if i := strings.LastIndex(line, "("); i > 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}
