package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// event is one line of go test -json: cmd/test2json's events and the
// build events go test adds (build-output, build-fail).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // on build-output and build-fail: the build
	FailedBuild string // on a package's fail: the build that failed
}

// testID names one test (or subtest) of one package. pkg is relative to
// the module ("consensus"), the module's root package is ".".
type testID struct{ pkg, name string }

func (id testID) String() string { return id.name + " (" + id.pkg + ")" }

// outcome is what one go test -json run showed, read line by line (add).
// Only events are trusted: a named test failed when its fail event came,
// or when its binary died of a panic that test2json gave to it.
type outcome struct {
	module string // trimmed from package paths

	passed    map[testID]bool // tests whose pass event came
	failed    []testID        // failed tests, in the order their failure ended (a subtest before its parent)
	pkgFailed []string        // packages whose run (or build) failed, in order
	buildErr  string          // the first compiler line of the first failed build; "" when every build passed
	timedOut  bool            // a test binary's own -timeout alarm fired
	hint      map[string]string
	plain     []string // lines that were not events (go's own errors)

	ended    map[testID]bool // pass, fail or skip came
	panicked []testID        // tests the output of a panic was given to, before their binary ended
	building map[string]string
	said     map[testID]*said // a running or failed test's output, bounded; dropped when it passes or skips
}

// said is what one test printed: its first saidHead lines (a Fatalf's own
// line comes before the output it quotes) and its last saidLines-saidHead
// (a panic's stack ends there); cut counts the lines left out between.
type said struct {
	lines []string
	cut   int
}

// saidLines bounds the output kept of one test: enough for a failure's
// assertion and its context, without holding a whole suite's logs.
const saidLines, saidHead = 40, 10

func (s *said) add(l string) {
	s.lines = append(s.lines, l)
	if len(s.lines) > saidLines {
		s.lines = append(s.lines[:saidHead], s.lines[saidHead+1:]...)
		s.cut++
	}
}

func (s *said) String() string {
	if s.cut == 0 {
		return strings.Join(s.lines, "\n")
	}
	return strings.Join(s.lines[:saidHead], "\n") + fmt.Sprintf("\n[... %d lines left out ...]\n", s.cut) + strings.Join(s.lines[saidHead:], "\n")
}

func newOutcome(module string) *outcome {
	return &outcome{module: module, passed: map[testID]bool{}, hint: map[string]string{},
		ended: map[testID]bool{}, building: map[string]string{}, said: map[testID]*said{}}
}

// parseOutput reads a whole go test -json output (for tests).
func parseOutput(module string, out []byte) *outcome {
	o := newOutcome(module)
	for _, l := range bytes.SplitAfter(out, []byte("\n")) {
		o.add(l)
	}
	return o
}

const timeoutPanic = "panic: test timed out after "

// add reads one line of output. It reports whether the line ended a
// package that failed: the whole failure of that package is then in o.
func (o *outcome) add(line []byte) (pkgFailed bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return false
	}
	ev, ok := parseEvent(line)
	if !ok {
		o.plain = append(o.plain, string(line))
		return false
	}
	pkg := o.rel(ev.Package)
	id := testID{pkg, ev.Test}
	switch ev.Action {
	case "build-output":
		l := strings.TrimSpace(ev.Output)
		if _, seen := o.building[ev.ImportPath]; !seen && l != "" && !strings.HasPrefix(l, "#") {
			o.building[ev.ImportPath] = l
		}
	case "build-fail":
		if o.buildErr == "" {
			o.buildErr = o.building[ev.ImportPath]
			if o.buildErr == "" {
				o.buildErr = "the build of " + o.rel(ev.ImportPath) + " failed"
			}
		}
	case "output":
		l := strings.TrimSpace(ev.Output)
		if ev.Test != "" && !strings.HasPrefix(l, "=== ") {
			if o.said[id] == nil {
				o.said[id] = &said{}
			}
			o.said[id].add(strings.TrimRight(ev.Output, "\n"))
		}
		switch {
		case strings.HasPrefix(l, timeoutPanic):
			o.timedOut = true
		case ev.Test != "" && strings.HasPrefix(l, "panic: "):
			o.panicked = append(o.panicked, id)
		case ev.Test == "" && o.hint[pkg] == "" && !boilerplate(l):
			o.hint[pkg] = l
		}
	case "pass":
		if ev.Test != "" {
			o.passed[id], o.ended[id] = true, true
			delete(o.said, id)
		}
	case "skip":
		o.ended[id] = true
		delete(o.said, id)
	case "fail":
		if ev.Test != "" {
			o.ended[id] = true
			o.failed = append(o.failed, id)
			return false
		}
		if ev.FailedBuild != "" && o.buildErr == "" {
			o.buildErr = o.building[ev.FailedBuild]
			if o.buildErr == "" {
				o.buildErr = "the build of " + o.rel(ev.FailedBuild) + " failed"
			}
		}
		// A binary that died of a panic never ends the test it was
		// running: that test failed.
		for _, p := range o.panicked {
			if p.pkg == pkg && !o.ended[p] {
				o.ended[p] = true
				o.failed = append(o.failed, p)
			}
		}
		o.pkgFailed = append(o.pkgFailed, pkg)
		return true
	}
	return false
}

// parseEvent reads one trimmed line as a go test -json event.
func parseEvent(line []byte) (ev event, ok bool) {
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
		return event{}, false
	}
	return ev, true
}

func (o *outcome) rel(pkg string) string {
	switch {
	case pkg == o.module:
		return "."
	case o.module != "" && strings.HasPrefix(pkg, o.module+"/"):
		return pkg[len(o.module)+1:]
	}
	return pkg
}

// boilerplate reports whether l is go test's own package line (PASS,
// FAIL, ok ...), which names no reason.
func boilerplate(l string) bool {
	for _, p := range []string{"PASS", "FAIL", "ok ", "? ", "testing: warning: no tests to run", "coverage: "} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return l == ""
}

// killer is the test that kills the mutant: of the tests that failed on
// it and passed on the baseline, the deepest subtest of the first to
// fail (its package, its top-level test). ok is false when no test that
// passes unmutated failed.
func (o *outcome) killer(base map[testID]bool) (id testID, ok bool) {
	for _, f := range o.failed {
		if !base[f] {
			continue
		}
		if !ok {
			id, ok = f, true
			continue
		}
		if f.pkg == id.pkg && top(f.name) == top(id.name) && depth(f.name) > depth(id.name) {
			id = f
		}
	}
	return id, ok
}

func top(name string) string     { return strings.SplitN(name, "/", 2)[0] }
func depth(name string) int      { return strings.Count(name, "/") }
func (o *outcome) first() string { return first(o.plain) }

func first(ls []string) string {
	if len(ls) == 0 {
		return "no output"
	}
	return ls[0]
}

// run is one go test run: what it showed, and how it ended.
type run struct {
	*outcome
	exitFailed bool          // go test exited non-zero
	deadline   bool          // the -timeout bound stopped it
	limit      time.Duration // that bound
}

// verdictKind is what one mutant's run showed. Only killed passes.
type verdictKind int

const (
	killed   verdictKind = iota // a named test that passes unmutated failed on it
	survived                    // every test passed on it
	errored                     // it could not be judged: it does not compile, or what failed names no test that passes unmutated
	timedOut                    // it ran past -timeout before any named test failed
)

func (k verdictKind) String() string {
	return [...]string{"killed", "SURVIVED", "ERROR", "TIMEOUT"}[k]
}

// judge decides a mutant from its compile step (built: go test -run '^$'
// over its suite), its run and the tests that passed on the baseline.
// Only a named test that failed on the mutant and passed on the
// baseline kills it; by is that test, or the reason for any other
// verdict.
func judge(built, ran run, base map[testID]bool) (k verdictKind, by string) {
	switch {
	case built.buildErr != "":
		return errored, "stale mutant: it does not compile: " + built.buildErr
	case built.deadline:
		return timedOut, fmt.Sprintf("compiling it ran past -timeout %v", built.limit)
	case built.exitFailed && len(built.pkgFailed) == 0:
		return errored, "go test could not compile its suite: " + built.first()
	case ran.buildErr != "":
		return errored, "stale mutant: it does not compile: " + ran.buildErr
	}
	if id, ok := ran.killer(base); ok {
		return killed, id.String()
	}
	switch {
	case ran.deadline || ran.timedOut:
		return timedOut, fmt.Sprintf("its run ran past -timeout %v with no named test failed", ran.limit)
	case len(ran.failed) > 0:
		return errored, "no test that passes unmutated failed: " + ran.failed[0].String() + " failed, but it did not pass on the baseline"
	case len(ran.pkgFailed) > 0:
		p := ran.pkgFailed[0]
		return errored, fmt.Sprintf("no named test failed: package %s failed (%s)", p, hintOr(ran.hint[p]))
	case ran.exitFailed:
		return errored, "go test failed: " + ran.first()
	}
	return survived, ""
}

func hintOr(h string) string {
	if h == "" {
		return "no reason printed"
	}
	return h
}

// baselineErr says why the unmutated tree's run cannot be a baseline
// (anything failed), or returns nil. The message names what failed.
func baselineErr(b run) error {
	var why, printed string
	switch {
	case b.buildErr != "":
		why = "it does not compile: " + b.buildErr
	case b.deadline || b.timedOut:
		why = fmt.Sprintf("it ran past -timeout %v", b.limit)
	case len(b.failed) > 0:
		names := make([]string, 0, 3)
		for i, f := range b.failed {
			if i == 3 {
				names = append(names, fmt.Sprintf("and %d more", len(b.failed)-3))
				break
			}
			names = append(names, f.String())
		}
		why = "failing: " + strings.Join(names, ", ")
		if said := b.said[b.failed[0]]; said != nil {
			// What the first failure printed: on CI it is all there is.
			printed = fmt.Sprintf("\n%s printed:\n%s", b.failed[0], said)
		}
	case len(b.pkgFailed) > 0:
		p := b.pkgFailed[0]
		why = fmt.Sprintf("package %s fails with no test named (%s)", p, hintOr(b.hint[p]))
	case b.exitFailed:
		why = "go test failed: " + b.first()
	default:
		return nil
	}
	return fmt.Errorf("the unmutated tree fails its own suite: %s (fix the tree first; no mutant can be judged)%s", why, printed)
}
