// Command mutate proves the suite has teeth: it applies each named mutant
// of its catalogue, one at a time, to a scratch copy of the repository,
// runs the fast suite (simulated and in-process backends, no MPI) against
// it, and prints a table: mutant, verdict, seconds, the test that killed
// it.
//
// First it runs, once, every suite the chosen mutants name on the
// unmutated copy (the baseline): if anything fails there it stops, since
// no mutant can be judged. A mutant is killed only by a named test that
// failed on it and passed on the baseline. Every other verdict fails
// the run: SURVIVED (every test passed), TIMEOUT (it ran past -timeout
// before a named test failed) and ERROR (it does not compile, its text
// is no longer in the code, or what failed names no test that passes
// unmutated: a leak checker's TestMain, a panic outside any test).
//
// A mutant first runs, alone, the test that killed it last (killers.txt,
// killers.go): a kill there, with the whole suite still passing go
// test's compile and vet checks, is the verdict the suite would give,
// its other test binaries neither linked nor run. In every other case the
// whole suite runs and decides.
//
//	go run ./tools/mutate [-run REGEXP] [-list] [-keep] [-timeout D] [-update-killers]
//
// make mutate runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/cpu"
)

type mutant struct {
	name, file string
	old, new   string
	also       []edit // further edits of the same mutant (one idea may need two places)
	why        string
	pkgs       []string // the suite to run (fast when empty)
	// mpi, when set, is the suite instead: the comm/mpi binding's tests
	// under real mpirun (a machine without mpirun skips the mutant and
	// says so; under CI=true that fails the run).
	mpi *mpiSuite
	// avx2: the mutant is in the AVX2 loops, which a machine without
	// AVX2 never runs: there it is skipped, and the run says so.
	avx2 bool
}

// edit replaces old, which must occur exactly once in file, by new.
type edit struct{ file, old, new string }

func (m mutant) edits() []edit { return append([]edit{{m.file, m.old, m.new}}, m.also...) }

// verdict is what one mutant's run showed.
type verdict struct {
	m      mutant
	kind   verdictKind
	by     string // the killing test, or the reason for any other verdict
	killer testID // the killing test
	first  bool   // killed by the test that killed it last, run alone first (killers.go)
	took   time.Duration
}

func main() {
	run := flag.String("run", "", "only mutants whose name matches this regexp")
	list := flag.Bool("list", false, "list the catalogue and exit")
	keep := flag.Bool("keep", false, "keep the scratch copy")
	timeout := flag.Duration("timeout", 5*time.Minute, "bound on one go test run (the baseline's, or one mutant's)")
	update := flag.Bool("update-killers", false, "rewrite "+killersFile+" from this run's verdicts")
	flag.Parse()
	if err := mainErr(os.Stdout, *run, *list, *keep, *update, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

func mainErr(w io.Writer, run string, list, keep, update bool, timeout time.Duration) error {
	re, err := regexp.Compile(run)
	if err != nil {
		return fmt.Errorf("-run %q: %v", run, err)
	}
	var ms []mutant
	for _, m := range catalogue {
		if re.MatchString(m.name) {
			ms = append(ms, m)
		}
	}
	if list {
		for _, m := range ms {
			fmt.Fprintf(w, "%-32s %-28s %s\n", m.name, m.file, m.why)
		}
		return nil
	}
	if len(ms) == 0 {
		return fmt.Errorf("no mutant matches -run %q", run)
	}
	var todo []mutant
	for _, m := range ms {
		if m.avx2 && !cpu.X86.HasAVX2 { // false off amd64 too
			fmt.Fprintf(w, "%-32s skipped  (in the AVX2 loops; this machine or build has none, so the suite runs the Go loops)\n", m.name)
			continue
		}
		if why := haveMPI(); m.mpi != nil && why != "" {
			if os.Getenv("CI") == "true" {
				return fmt.Errorf("%s is an MPI mutant and %s (CI=true: MPI mutants are never skipped)", m.name, why)
			}
			fmt.Fprintf(w, "%-32s skipped  (an MPI mutant: %s)\n", m.name, why)
			continue
		}
		todo = append(todo, m)
	}
	if len(todo) == 0 {
		return fmt.Errorf("every mutant matching -run %q was skipped: nothing was checked", run)
	}
	scratch, err := copyRepo()
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(w, "mutate: scratch copy in", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	module, err := modulePath(scratch)
	if err != nil {
		return err
	}
	killers, err := readKillers(filepath.Join(scratch, killersFile))
	if err != nil {
		return err
	}
	pkgs, suites := baselineSuites(todo)
	start := time.Now()
	base := map[testID]bool{}
	var what []string
	if len(pkgs) > 0 {
		b, err := goTest(scratch, module, testArgs(timeout, pkgs...), timeout, nil)
		if err != nil {
			return fmt.Errorf("the baseline: %v", err)
		}
		if err := baselineErr(b); err != nil {
			return err
		}
		maps.Copy(base, b.passed)
		what = append(what, strings.Join(pkgs, " "))
	}
	for _, s := range suites {
		b, err := mpiTest(scratch, module, s, timeout, nil)
		if err != nil {
			return fmt.Errorf("the baseline (%s): %v", s, err)
		}
		if err := baselineErr(b); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		maps.Copy(base, b.passed)
		what = append(what, s.String())
	}
	fmt.Fprintf(w, "mutate: baseline: %d tests pass unmutated (%s; %.1fs)\n", len(base), strings.Join(what, "; "), time.Since(start).Seconds())
	first := newFirstRuns(scratch, module, killers, timeout)
	var vs []verdict
	for _, m := range todo {
		v := try(scratch, module, m, first, base, timeout)
		vs = append(vs, v)
		fmt.Fprintln(w, v.line())
	}
	if update {
		known := func(name string) bool {
			return slices.ContainsFunc(catalogue, func(m mutant) bool { return m.name == name })
		}
		if err := saveKillers(updatedKillers(killers, vs, known)); err != nil {
			return err
		}
		fmt.Fprintln(w, "mutate: rewrote", killersFile)
	}
	return summary(w, vs)
}

// saveKillers writes ks to the checkout's killers file.
func saveKillers(ks map[string]testID) error {
	root, err := checkoutRoot()
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(root, killersFile))
	if err != nil {
		return err
	}
	if err := writeKillers(f, ks); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// suite is the packages m's run tests: its own, or the fast suite.
func (m mutant) suite() []string {
	if len(m.pkgs) > 0 {
		return m.pkgs
	}
	return fast
}

// baselineSuites is every package the mutants' go test runs test, each
// once, in the order first named, and every MPI suite they run, each
// once: the baseline must pass all of them.
func baselineSuites(ms []mutant) (pkgs []string, suites []mpiSuite) {
	seen := map[string]bool{}
	for _, m := range ms {
		if m.mpi != nil {
			if k := m.mpi.String(); !seen[k] {
				seen[k] = true
				suites = append(suites, *m.mpi)
			}
			continue
		}
		for _, p := range m.suite() {
			if !seen[p] {
				seen[p] = true
				pkgs = append(pkgs, p)
			}
		}
	}
	return pkgs, suites
}

// testArgs is go test's command line for one run of pkgs (and flags):
// events as JSON, no cached results, and each test binary bounded by the
// whole run's timeout.
func testArgs(timeout time.Duration, pkgs ...string) []string {
	return append([]string{"test", "-json", "-count=1", "-timeout", timeout.String()}, pkgs...)
}

func (v verdict) line() string {
	switch v.kind {
	case killed:
		return fmt.Sprintf("%-32s killed   %6.1fs  by %s", v.m.name, v.took.Seconds(), v.by)
	case survived:
		return fmt.Sprintf("%-32s SURVIVED %6.1fs  (%s)", v.m.name, v.took.Seconds(), v.m.why)
	}
	return fmt.Sprintf("%-32s %-8s %6.1fs  %s", v.m.name, v.kind, v.took.Seconds(), v.by)
}

// summary prints the table and returns an error unless every mutant was
// killed; the error counts each verdict.
func summary(w io.Writer, vs []verdict) error {
	var n [timedOut + 1]int
	fmt.Fprintf(w, "\n%-32s %-8s %7s  %s\n", "mutant", "verdict", "seconds", "killed by")
	for _, v := range vs {
		n[v.kind]++
		by := v.by
		if v.kind == survived {
			by = v.m.why
		}
		fmt.Fprintf(w, "%-32s %-8s %7.1f  %s\n", v.m.name, v.kind, v.took.Seconds(), by)
	}
	first, plain, mpi := 0, 0, 0
	for _, v := range vs {
		switch {
		case v.m.mpi != nil:
			mpi++
		case v.first:
			first++
		default:
			plain++
		}
	}
	fmt.Fprintf(w, "mutate: %d of %d non-MPI mutants killed by their %s test run alone; %d went to their whole suite; %d MPI mutants ran under mpirun\n",
		first, first+plain, killersFile, plain, mpi)
	if n[killed] < len(vs) {
		return fmt.Errorf("FAIL: %s: %d killed, %d survived, %d error, %d timeout (each must be killed by a named test that passes unmutated)",
			mutants(len(vs)), n[killed], n[survived], n[errored], n[timedOut])
	}
	fmt.Fprintf(w, "mutate: PASS (%s, all killed by a named test that passes unmutated)\n", mutants(len(vs)))
	return nil
}

func mutants(n int) string {
	if n == 1 {
		return "1 mutant"
	}
	return fmt.Sprintf("%d mutants", n)
}

// try applies m in scratch, compiles its suite, runs it and restores
// the files. base is the tests that passed on the baseline. The test
// that killed m last runs alone first (first, when not nil); only when
// it does not kill m does the whole suite run.
func try(scratch, module string, m mutant, first *firstRuns, base map[testID]bool, timeout time.Duration) (v verdict) {
	v.m = m
	start := time.Now()
	defer func() { v.took = time.Since(start) }()
	var h testID
	hinted := false
	if first != nil {
		h, hinted = first.usable(m, base) // before m is applied: it may run h on the unmutated tree
	}
	for _, e := range m.edits() {
		restore, err := apply(scratch, e)
		if err != nil {
			v.kind, v.by = errored, err.Error()
			return v
		}
		defer restore()
	}
	if hinted {
		if kv, ok := first.kill(m, h, base); ok {
			return kv
		}
	}
	if m.mpi != nil {
		ran, err := mpiTest(scratch, module, *m.mpi, timeout, func(o *outcome) bool { _, ok := o.killer(base); return ok })
		if err != nil {
			v.kind, v.by = errored, err.Error()
			return v
		}
		built := run{outcome: newOutcome(module)}
		if ran.buildErr != "" {
			built, ran = ran, run{outcome: newOutcome(module)}
		}
		v.kind, v.by = judge(built, ran, base)
		return v
	}
	// go test -run '^$' builds every test binary (and go test's vet
	// checks) and runs none of the tests: a failed build shows here,
	// before the run, which stops at its first failure, can hide it.
	built, err := goTest(scratch, module, append(testArgs(timeout, "-run", "^$"), m.suite()...), timeout, nil)
	if err != nil {
		v.kind, v.by = errored, err.Error()
		return v
	}
	if built.buildErr != "" || built.deadline {
		v.kind, v.by = judge(built, run{outcome: newOutcome(module)}, base)
		return v
	}
	ran, err := goTest(scratch, module, append(testArgs(timeout, "-failfast"), m.suite()...), timeout,
		func(o *outcome) bool { _, ok := o.killer(base); return ok })
	if err != nil {
		v.kind, v.by = errored, err.Error()
		return v
	}
	v.kind, v.by = judge(built, ran, base)
	if v.kind == killed {
		v.killer, _ = ran.killer(base)
	}
	return v
}

// goTest runs go with args (go test -json ...) in dir and reads its
// events. stop, when not nil, is asked after each package that failed:
// true stops the whole run there (the verdict is known; the rest need
// not run). The run ends at timeout (deadline). err is only an error of
// starting or reading go, never a failure of the tests.
func goTest(dir, module string, args []string, timeout time.Duration, stop func(*outcome) bool) (run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the test binaries too
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return run{}, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return run{}, err
	}
	o := newOutcome(module)
	rd := bufio.NewReader(pipe)
	for {
		l, rerr := rd.ReadBytes('\n')
		if o.add(l) && stop != nil && stop(o) {
			cancel()
		}
		if rerr != nil {
			break
		}
	}
	werr := cmd.Wait()
	return run{outcome: o, exitFailed: werr != nil, deadline: ctx.Err() == context.DeadlineExceeded, limit: timeout}, nil
}

// modulePath is the module path of the go.mod in dir.
func modulePath(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", filepath.Join(dir, "go.mod"))
}

// apply makes one edit in scratch and returns what undoes it.
func apply(scratch string, e edit) (func(), error) {
	path := filepath.Join(scratch, e.file)
	orig, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if n := bytes.Count(orig, []byte(e.old)); n != 1 {
		return nil, fmt.Errorf("%s: the text to replace occurs %d times, want once (stale catalogue)", e.file, n)
	}
	if err := os.WriteFile(path, bytes.Replace(orig, []byte(e.old), []byte(e.new), 1), 0o644); err != nil {
		return nil, err
	}
	return func() { _ = os.WriteFile(path, orig, 0o644) }, nil
}

// copyRepo copies the files git knows (tracked, and untracked but not
// ignored) into a fresh scratch directory.
func copyRepo() (string, error) {
	src, err := checkoutRoot()
	if err != nil {
		return "", err
	}
	files, err := exec.Command("git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return "", err
	}
	dst, err := os.MkdirTemp("", "rankrun-mutate-")
	if err != nil {
		return "", err
	}
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		if err := copyFile(filepath.Join(src, f), filepath.Join(dst, f)); err != nil {
			os.RemoveAll(dst)
			return "", err
		}
	}
	return dst, nil
}

// checkoutRoot is the top of the git checkout this runs in.
func checkoutRoot() (string, error) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not in a git checkout: %v", err)
	}
	return strings.TrimSpace(string(root)), nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if os.IsNotExist(err) {
		return nil // deleted in the work tree
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	fi, err := os.Stat(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, fi.Mode().Perm())
}
