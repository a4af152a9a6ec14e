package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mod = "example.com/m"

// events is go test -json output: each ev is action, package (relative
// to mod), test, output; a plain string is a line that is not an event.
func events(t *testing.T, evs ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, e := range evs {
		switch e := e.(type) {
		case string:
			b.WriteString(e + "\n")
		case event:
			if e.Package != "" {
				e.Package = mod + "/" + e.Package
			}
			j, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(append(j, '\n'))
		}
	}
	return b.Bytes()
}

func pass(pkg, test string) event { return event{Action: "pass", Package: pkg, Test: test} }
func fail(pkg, test string) event { return event{Action: "fail", Package: pkg, Test: test} }
func out(pkg, test, l string) event {
	return event{Action: "output", Package: pkg, Test: test, Output: l + "\n"}
}

// buildFail is go test's events for a package that does not compile.
func buildFail(pkg, line string) []any {
	ip := mod + "/" + pkg + " [" + mod + "/" + pkg + ".test]"
	return []any{
		event{Action: "build-output", ImportPath: ip, Output: "# " + ip + "\n"},
		event{Action: "build-output", ImportPath: ip, Output: line + "\n"},
		event{Action: "build-fail", ImportPath: ip},
		out(pkg, "", "FAIL\t"+mod+"/"+pkg+" [build failed]"),
		event{Action: "fail", Package: pkg, FailedBuild: ip},
	}
}

func parse(t *testing.T, evs ...any) *outcome { return parseOutput(mod, events(t, evs...)) }

func id(pkg, name string) testID { return testID{pkg, name} }

func TestParseOutputPassFailSkip(t *testing.T) {
	o := parse(t,
		event{Action: "start", Package: "a"},
		out("a", "TestA", "=== RUN   TestA"),
		pass("a", "TestA"),
		event{Action: "skip", Package: "a", Test: "TestS"},
		fail("a", "TestP/sub"),
		out("a", "TestP", "--- FAIL: TestP (0.00s)"),
		fail("a", "TestP"),
		out("a", "", "FAIL"),
		fail("a", ""),
		pass("b", "TestB"),
		pass("b", ""),
	)
	wantPassed := map[testID]bool{id("a", "TestA"): true, id("b", "TestB"): true}
	if !reflect.DeepEqual(o.passed, wantPassed) {
		t.Errorf("passed = %v, want %v", o.passed, wantPassed)
	}
	if want := []testID{id("a", "TestP/sub"), id("a", "TestP")}; !reflect.DeepEqual(o.failed, want) {
		t.Errorf("failed = %v, want %v", o.failed, want)
	}
	if want := []string{"a"}; !reflect.DeepEqual(o.pkgFailed, want) {
		t.Errorf("pkgFailed = %v, want %v", o.pkgFailed, want)
	}
	if o.buildErr != "" || o.timedOut || len(o.plain) != 0 || o.hint["a"] != "" {
		t.Errorf("buildErr %q, timedOut %v, plain %q, hint %q: want none", o.buildErr, o.timedOut, o.plain, o.hint["a"])
	}
}

func TestParseOutputRootPackageAndPlainLines(t *testing.T) {
	o := parseOutput(mod, []byte("go: downloading example.com/x v1.0.0\n"+
		`{"Action":"pass","Package":"`+mod+`","Test":"TestRoot"}`+"\n"))
	if !o.passed[id(".", "TestRoot")] {
		t.Errorf("the module's root package: passed = %v, want TestRoot in \".\"", o.passed)
	}
	if want := []string{"go: downloading example.com/x v1.0.0"}; !reflect.DeepEqual(o.plain, want) {
		t.Errorf("plain = %q, want %q", o.plain, want)
	}
}

func TestParseOutputBuildFailureNamesFirstCompilerLine(t *testing.T) {
	o := parse(t, append(buildFail("a", "a/x.go:3:9: undefined: y"), buildFail("b", "b/z.go:1:1: other")...)...)
	if want := "a/x.go:3:9: undefined: y"; o.buildErr != want {
		t.Errorf("buildErr = %q, want %q", o.buildErr, want)
	}
	if want := []string{"a", "b"}; !reflect.DeepEqual(o.pkgFailed, want) {
		t.Errorf("pkgFailed = %v, want %v", o.pkgFailed, want)
	}
}

// A panic off the test's goroutine kills the binary with no fail event
// for the test that test2json gave the panic to: that test failed.
func TestParseOutputPanicFailsTheRunningTest(t *testing.T) {
	o := parse(t,
		out("a", "TestG", "=== RUN   TestG"),
		out("a", "TestG", "panic: boom"),
		out("a", "", "FAIL\t"+mod+"/a\t0.004s"),
		fail("a", ""),
	)
	if want := []testID{id("a", "TestG")}; !reflect.DeepEqual(o.failed, want) {
		t.Errorf("failed = %v, want %v", o.failed, want)
	}
}

// go test's own -timeout alarm panics inside the running test: a
// timeout, not a failure of that test.
func TestParseOutputTimeoutAlarmIsNoFailure(t *testing.T) {
	o := parse(t,
		out("a", "TestSlow", "=== RUN   TestSlow"),
		out("a", "TestSlow", "panic: test timed out after 2s"),
		out("a", "TestSlow", "\trunning tests:"),
		fail("a", ""),
	)
	if !o.timedOut {
		t.Error("timedOut = false, want true")
	}
	if len(o.failed) != 0 {
		t.Errorf("failed = %v, want none", o.failed)
	}
}

func TestParseOutputPackageHint(t *testing.T) {
	o := parse(t,
		pass("a", "TestA"),
		out("a", "", "PASS"),
		out("a", "", "goleak: Errors on successful test run: found unexpected goroutines:"),
		out("a", "", "FAIL\t"+mod+"/a\t0.002s"),
		fail("a", ""),
	)
	if want := "goleak: Errors on successful test run: found unexpected goroutines:"; o.hint["a"] != want {
		t.Errorf("hint = %q, want %q", o.hint["a"], want)
	}
}

func TestKillerFailedOnMutantAndPassedOnBaseline(t *testing.T) {
	base := map[testID]bool{id("a", "TestP"): true, id("a", "TestP/x"): true, id("a", "TestP/x/y"): true, id("a", "TestQ"): true}
	for _, c := range []struct {
		name   string
		failed []testID
		want   string // "" for no killer
	}{
		{"deepest subtest", []testID{id("a", "TestP/x/y"), id("a", "TestP/x"), id("a", "TestP")}, "TestP/x/y (a)"},
		{"deepest whatever the order", []testID{id("a", "TestP"), id("a", "TestP/x/y"), id("a", "TestP/x")}, "TestP/x/y (a)"},
		{"first top-level test", []testID{id("a", "TestQ"), id("a", "TestP/x/y")}, "TestQ (a)"},
		{"a subtest new since the baseline: its parent", []testID{id("a", "TestP/new"), id("a", "TestP")}, "TestP (a)"},
		{"not on the baseline", []testID{id("a", "TestBroken")}, ""},
		{"same name, other package", []testID{id("b", "TestQ")}, ""},
		{"nothing failed", nil, ""},
	} {
		o := newOutcome(mod)
		o.failed = c.failed
		k, ok := o.killer(base)
		got := ""
		if ok {
			got = k.String()
		}
		if got != c.want {
			t.Errorf("%s: killer = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestJudge(t *testing.T) {
	base := map[testID]bool{id("a", "TestA"): true, id("a", "TestA/sub"): true}
	clean := run{outcome: parse(t, pass("a", "TestA"), pass("a", ""))}
	r := func(exitFailed, deadline bool, evs ...any) run {
		return run{outcome: parse(t, evs...), exitFailed: exitFailed, deadline: deadline, limit: time.Minute}
	}
	for _, c := range []struct {
		name       string
		built, ran run
		kind       verdictKind
		by         string // a prefix of the reason
	}{
		{"every test passed", clean, clean, survived, ""},
		{"a baseline test failed", clean, r(true, false, fail("a", "TestA/sub"), fail("a", "TestA"), fail("a", "")), killed, "TestA/sub (a)"},
		{"a panic inside a named test", clean, r(true, false, out("a", "TestA", "panic: boom"), fail("a", "")), killed, "TestA (a)"},
		{"it does not compile", r(true, false, buildFail("a", "a/x.go:3:9: undefined: y")...), clean, errored,
			"stale mutant: it does not compile: a/x.go:3:9: undefined: y"},
		{"the run does not compile", clean, r(true, false, buildFail("a", "a/x.go:3:9: undefined: y")...), errored,
			"stale mutant: it does not compile: a/x.go:3:9: undefined: y"},
		{"compiling ran past the timeout", r(true, true), clean, timedOut, "compiling it ran past -timeout 1m0s"},
		{"the run ran past the timeout", clean, r(true, true, pass("a", "TestA")), timedOut, "its run ran past -timeout 1m0s with no named test failed"},
		{"the binary's alarm", clean, r(true, false, out("a", "TestA", "panic: test timed out after 1m0s"), fail("a", "")), timedOut, "its run ran past -timeout 1m0s"},
		{"a named test failed before the timeout", clean, r(true, true, fail("a", "TestA")), killed, "TestA (a)"},
		{"a test not on the baseline failed", clean, r(true, false, fail("a", "TestBroken"), fail("a", "")), errored,
			"no test that passes unmutated failed: TestBroken (a) failed, but it did not pass on the baseline"},
		{"a package failed with no test named", clean, r(true, false, pass("a", "TestA"), out("a", "", "goleak: found unexpected goroutines"), fail("a", "")), errored,
			"no named test failed: package a failed (goleak: found unexpected goroutines)"},
		{"a panic outside any test", clean, r(true, false, out("a", "", "panic: in init"), fail("a", "")), errored,
			"no named test failed: package a failed (panic: in init)"},
		{"go test failed before any package", clean, r(true, false, "go: inconsistent vendoring"), errored, "go test failed: go: inconsistent vendoring"},
		{"go test could not compile", r(true, false, "go: inconsistent vendoring"), clean, errored, "go test could not compile its suite: go: inconsistent vendoring"},
	} {
		k, by := judge(c.built, c.ran, base)
		if k != c.kind || !strings.HasPrefix(by, c.by) || (c.by == "" && by != "") {
			t.Errorf("%s: judge = %v %q, want %v %q", c.name, k, by, c.kind, c.by)
		}
	}
}

// A long output keeps its head (a Fatalf's own line) and its tail (a
// panic's end), and says how much it left out.
func TestSaidHeadAndTail(t *testing.T) {
	var s said
	for i := range 45 {
		s.add(fmt.Sprint("line ", i))
	}
	got := strings.Split(s.String(), "\n")
	if len(got) != 41 || got[0] != "line 0" || got[9] != "line 9" || got[10] != "[... 5 lines left out ...]" || got[11] != "line 15" || got[40] != "line 44" {
		t.Errorf("45 lines kept as:\n%s", s.String())
	}
	var short said
	short.add("a")
	short.add("b")
	if short.String() != "a\nb" {
		t.Errorf("2 lines kept as %q", short.String())
	}
}

func TestBaselineErr(t *testing.T) {
	const suffix = " (fix the tree first; no mutant can be judged)"
	if err := baselineErr(run{outcome: parse(t, pass("a", "TestA"), pass("a", ""))}); err != nil {
		t.Errorf("a clean baseline: %v, want nil", err)
	}
	for _, c := range []struct {
		name string
		b    run
		want string
	}{
		{"a failing test", run{outcome: parse(t, pass("a", "TestA"), fail("a", "TestBroken"), fail("a", "")), exitFailed: true}, "failing: TestBroken (a)"},
		{"what it printed", run{outcome: parse(t, out("a", "TestBroken", "=== RUN   TestBroken"), out("a", "TestBroken", "    x_test.go:9: got 2, want 1"),
			out("a", "TestOK", "    x_test.go:3: a log of a passing test"), pass("a", "TestOK"), fail("a", "TestBroken"), fail("a", "")), exitFailed: true},
			"failing: TestBroken (a)" + suffix + "\nTestBroken (a) printed:\n    x_test.go:9: got 2, want 1"},
		{"many", run{outcome: parse(t, fail("a", "T1"), fail("a", "T2"), fail("a", "T3"), fail("a", "T4"), fail("a", "T5"), fail("a", "")), exitFailed: true},
			"failing: T1 (a), T2 (a), T3 (a), and 2 more"},
		{"a build", run{outcome: parse(t, buildFail("a", "a/x.go:1:1: bad")...), exitFailed: true}, "it does not compile: a/x.go:1:1: bad"},
		{"a package", run{outcome: parse(t, out("a", "", "goleak: leaked"), fail("a", "")), exitFailed: true}, "package a fails with no test named (goleak: leaked)"},
		{"the timeout", run{outcome: parse(t, pass("a", "TestA")), exitFailed: true, deadline: true, limit: time.Minute}, "it ran past -timeout 1m0s"},
		{"go itself", run{outcome: parse(t, "go: no Go files"), exitFailed: true}, "go test failed: go: no Go files"},
	} {
		err := baselineErr(c.b)
		want := "the unmutated tree fails its own suite: " + c.want
		if !strings.Contains(want, suffix) {
			want += suffix
		}
		if err == nil || err.Error() != want {
			t.Errorf("%s: baselineErr = %v, want %q", c.name, err, want)
		}
	}
}

func TestSummary(t *testing.T) {
	v := func(name string, k verdictKind, by string) verdict {
		return verdict{m: mutant{name: name, why: "why " + name}, kind: k, by: by, took: 1500 * time.Millisecond}
	}
	var w bytes.Buffer
	if err := summary(&w, []verdict{v("m1", killed, "TestA (a)"), v("m2", killed, "TestB (b)")}); err != nil {
		t.Fatalf("all killed: %v", err)
	}
	if want := "mutate: PASS (2 mutants, all killed by a named test that passes unmutated)\n"; !strings.HasSuffix(w.String(), want) {
		t.Errorf("all killed: output ends %q, want %q", w.String(), want)
	}
	w.Reset()
	if err := summary(&w, []verdict{v("m1", killed, "TestA (a)")}); err != nil || !strings.HasSuffix(w.String(), "mutate: PASS (1 mutant, all killed by a named test that passes unmutated)\n") {
		t.Errorf("one killed: %v, output ends %q", err, w.String())
	}
	w.Reset()
	err := summary(&w, []verdict{v("m1", killed, "TestA (a)"), v("m2", survived, ""), v("m3", errored, "stale mutant: x"), v("m4", timedOut, "t"), v("m5", errored, "y")})
	if want := "FAIL: 5 mutants: 1 killed, 1 survived, 2 error, 1 timeout (each must be killed by a named test that passes unmutated)"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("summary = %v, want an error starting %q", err, want)
	}
	for _, l := range []string{
		"m2                               SURVIVED     1.5  why m2\n",
		"m3                               ERROR        1.5  stale mutant: x\n",
		"m4                               TIMEOUT      1.5  t\n",
	} {
		if !strings.Contains(w.String(), l) {
			t.Errorf("table lacks %q:\n%s", l, w.String())
		}
	}
	if strings.Contains(w.String(), "PASS") {
		t.Errorf("a failing run printed PASS:\n%s", w.String())
	}
}

func TestBaselineSuites(t *testing.T) {
	mpi := &mpiSuite{nps: []int{2, 3}, pattern: "TestConformance"}
	ms := []mutant{{name: "a"}, {name: "b", pkgs: []string{"./comm/local", "./tests/multirank"}}, {name: "m1", mpi: mpi},
		{name: "c", pkgs: []string{"./comm/..."}}, {name: "m2", mpi: &mpiSuite{nps: []int{2, 3}, pattern: "TestConformance"}}}
	want := append(append([]string{}, fast...), "./comm/local", "./comm/...")
	pkgs, suites := baselineSuites(ms)
	if !reflect.DeepEqual(pkgs, want) {
		t.Errorf("baselineSuites packages = %v, want %v", pkgs, want)
	}
	if len(suites) != 1 || suites[0].String() != "mpirun -np 2,3 ./comm/mpi -test.run TestConformance" {
		t.Errorf("baselineSuites MPI suites = %v, want the one suite once", suites)
	}
}

// TestRankStreamDeathFailsItsTest: a rank whose process ended inside a
// test (MPI_Abort, a crash) leaves the test started and never ended: it
// failed, although the other ranks passed it.
func TestRankStreamDeathFailsItsTest(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool")
	}
	dir := t.TempDir()
	passed := "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n--- PASS: TestB (0.00s)\nPASS\n"
	died := "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\nsomething aborted\n"
	o := newOutcome("m")
	for i, text := range []string{passed, died} {
		f := filepath.Join(dir, fmt.Sprintf("rank.%d", i))
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := readRankStream(o, "m/comm/mpi", f); err != nil {
			t.Fatal(err)
		}
	}
	base := map[testID]bool{{"comm/mpi", "TestA"}: true, {"comm/mpi", "TestB"}: true}
	id, ok := o.killer(base)
	if !ok || id != (testID{"comm/mpi", "TestB"}) {
		t.Fatalf("killer = %v, %v; want TestB (comm/mpi), which rank 1 never ended; failed %v", id, ok, o.failed)
	}
}

// Every mutant's texts occur exactly once in their files, and names are
// unique: a catalogue gone stale by an unrelated change (a second copy of
// a line) fails here, in go test, not first in a 20-minute make mutate.
func TestCatalogueTextsOccurOnce(t *testing.T) {
	root := filepath.Join("..", "..")
	names := map[string]bool{}
	for _, m := range catalogue {
		if names[m.name] {
			t.Errorf("%s: two mutants of this name", m.name)
		}
		names[m.name] = true
		for _, e := range m.edits() {
			b, err := os.ReadFile(filepath.Join(root, e.file))
			if err != nil {
				t.Errorf("%s: %v", m.name, err)
				continue
			}
			if n := bytes.Count(b, []byte(e.old)); n != 1 {
				t.Errorf("%s: %s: the text to replace occurs %d times, want once", m.name, e.file, n)
			}
		}
	}
}

// The killers file round-trips, and a line that is not mutant, package,
// top-level test (tab-separated), or names a mutant twice, is refused
// with its line number.
func TestKillersFile(t *testing.T) {
	ks := map[string]testID{"b-mutant": {"executor", "TestB"}, "a-mutant": {"tests/multirank", "TestA"}}
	var buf bytes.Buffer
	require.NoError(t, writeKillers(&buf, ks))
	assert.True(t, strings.HasSuffix(buf.String(), "a-mutant\ttests/multirank\tTestA\nb-mutant\texecutor\tTestB\n"), buf.String())
	got, err := parseKillers(&buf, "k")
	require.NoError(t, err)
	assert.Equal(t, ks, got)

	for _, bad := range []string{"m\texecutor", "m executor TestA", "m\texecutor\tTestA/sub", "m\texecutor\tBenchmarkA", "\texecutor\tTestA", "m\texecutor\tTestA\nm\tcomm\tTestB"} {
		_, err := parseKillers(strings.NewReader("# head\n\n"+bad+"\n"), "k")
		require.Error(t, err, "%q", bad)
		assert.Contains(t, err.Error(), fmt.Sprintf("k:%d: ", 3+strings.Count(bad, "\n")), "%q", bad)
	}
}

// -update-killers keeps the lines of mutants that did not run, records
// each killed one's top-level test, and drops a mutant that ran and was
// not killed, and one no longer in the catalogue; an MPI mutant (its
// suite runs under mpirun, never alone first) gets none.
func TestUpdatedKillers(t *testing.T) {
	old := map[string]testID{"idle": {"executor", "TestOld"}, "gone": {"executor", "TestGone"}, "moved": {"comm", "TestWas"}}
	vs := []verdict{
		{m: mutant{name: "moved"}, kind: killed, killer: testID{"tests/multirank", "TestScenarios/fault.txt/sim"}},
		{m: mutant{name: "gone"}, kind: survived},
		{m: mutant{name: "new"}, kind: killed, killer: testID{"transceiver", "TestT"}},
		{m: mutant{name: "mpi", mpi: &mpiSuite{}}, kind: killed, killer: testID{"comm/mpi", "TestConformance"}},
	}
	old["removed"] = testID{"executor", "TestRemoved"}
	known := func(name string) bool { return name != "removed" }
	assert.Equal(t, map[string]testID{
		"idle":  {"executor", "TestOld"},
		"moved": {"tests/multirank", "TestScenarios"},
		"new":   {"transceiver", "TestT"},
	}, updatedKillers(old, vs, known))
}

// The committed killers file parses, and names only mutants of the
// catalogue that run alone first (no MPI mutant).
func TestKillersFileNamesCatalogueMutants(t *testing.T) {
	ks, err := readKillers(filepath.Join("..", "..", killersFile))
	require.NoError(t, err)
	require.NotEmpty(t, ks, "%s is empty: every mutant would run its whole suite", killersFile)
	byName := map[string]mutant{}
	for _, m := range catalogue {
		byName[m.name] = m
	}
	for name := range ks {
		m, ok := byName[name]
		if assert.True(t, ok, "%s names %s, which is not in the catalogue", killersFile, name) {
			assert.Nil(t, m.mpi, "%s names %s, an MPI mutant", killersFile, name)
		}
	}
}

// try with a last killer, on a scratch module (y imports x): the killer
// run alone kills, named as its deepest subtest and marked first; in
// every other case the verdict is the one the whole suite gives without
// the line. A stale line (a test that passes on the mutant); a test out
// of the mutant's suite; a mutant that fails go test's vet checks in a
// package the killer's run does not build; a test that fails alone on
// the unmutated tree (it needs an earlier test); an MPI mutant.
func TestTryWithLastKiller(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	write("go.mod", "module "+mod+"\n\ngo 1.22\n")
	write("x/x.go", "package x\n\nimport \"fmt\"\n\nfunc Two() int { return 2 }\n\nfunc Name() string { return fmt.Sprintf(\"%s\", \"ok\") }\n")
	write("x/x_test.go", "package x\n\nimport \"testing\"\n\nfunc TestName(t *testing.T) {\n\tif Name() != \"ok\" {\n\t\tt.Fatal(Name())\n\t}\n}\n")
	write("y/y_test.go", `package y

import (
	"testing"

	"example.com/m/x"
)

func TestTwo(t *testing.T) { t.Run("sub", func(t *testing.T) { if x.Two() != 2 { t.Fatal("not two") } }) }

func TestPasses(t *testing.T) {}

var set bool

func TestSets(t *testing.T) { set = true }

func TestNeedsSet(t *testing.T) {
	if !set {
		t.Fatal("run alone")
	}
	if x.Two() != 2 {
		t.Fatal("not two")
	}
}
`)
	b, err := goTest(dir, mod, testArgs(time.Minute, "./..."), time.Minute, nil)
	require.NoError(t, err)
	require.NoError(t, baselineErr(b))
	base := b.passed

	three := mutant{name: "three", file: "x/x.go", old: "return 2", new: "return 3", pkgs: []string{"./x", "./y"}}
	verb := three
	verb.name, verb.also = "verb", []edit{{"x/x.go", `"%s", "ok"`, `"%d", "ok"`}}
	outOfSuite := three
	outOfSuite.pkgs = []string{"./x"}
	for _, c := range []struct {
		what   string
		m      mutant
		killer testID
		kind   verdictKind
		by     string
		first  bool
	}{
		{"the killer kills", three, testID{"y", "TestTwo"}, killed, "TestTwo/sub (y)", true},
		{"a stale line", three, testID{"y", "TestPasses"}, killed, "TestTwo/sub (y)", false},
		{"out of the suite", outOfSuite, testID{"y", "TestTwo"}, survived, "", false},
		{"vet fails elsewhere", verb, testID{"y", "TestTwo"}, errored, "stale mutant: it does not compile", false},
		{"fails alone unmutated", three, testID{"y", "TestNeedsSet"}, killed, "TestTwo/sub (y)", false},
		{"an MPI mutant", mutant{name: "mpi", mpi: &mpiSuite{}, pkgs: []string{"./y"}}, testID{"y", "TestTwo"}, 0, "", false},
	} {
		t.Run(c.what, func(t *testing.T) {
			first := newFirstRuns(dir, mod, map[string]testID{c.m.name: c.killer}, time.Minute)
			if c.m.mpi != nil {
				_, ok := first.usable(c.m, base)
				assert.False(t, ok, "an MPI mutant's suite runs under mpirun, never its killer alone")
				return
			}
			v := try(dir, mod, c.m, first, base, time.Minute)
			assert.Equal(t, c.kind, v.kind, "%+v", v)
			assert.True(t, strings.HasPrefix(v.by, c.by), "by %q, want %q", v.by, c.by)
			assert.Equal(t, c.first, v.first)
			if c.kind == killed {
				assert.Equal(t, testID{"y", "TestTwo/sub"}, v.killer, "the killer is recorded on either path")
			}
		})
	}
	src, err := os.ReadFile(filepath.Join(dir, "x/x.go"))
	require.NoError(t, err)
	assert.Contains(t, string(src), "return 2", "try restores the files")
}
