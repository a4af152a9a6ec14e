// Command mutate proves the suite has teeth: it applies each named mutant
// of its catalogue, one at a time, to a scratch copy of the repository,
// runs the fast suite (simulated and in-process backends, no MPI) against
// it, and prints a table: mutant, the test that killed it, seconds. A
// mutant that no test kills, or one whose text is no longer in the code
// (a stale catalogue), fails the run.
//
//	go run ./cmd/mutate [-run REGEXP] [-list] [-keep]
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
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	killed bool
	by     string // the first failing test (or the build failure)
	took   time.Duration
	err    error // the mutant could not be applied or run
}

func main() {
	run := flag.String("run", "", "only mutants whose name matches this regexp")
	list := flag.Bool("list", false, "list the catalogue and exit")
	keep := flag.Bool("keep", false, "keep the scratch copy")
	timeout := flag.Duration("timeout", 5*time.Minute, "bound on one mutant's test run")
	flag.Parse()
	if err := mainErr(os.Stdout, *run, *list, *keep, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

func mainErr(w io.Writer, run string, list, keep bool, timeout time.Duration) error {
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
	scratch, err := copyRepo()
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(w, "mutate: scratch copy in", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	var vs []verdict
	for _, m := range ms {
		if m.avx2 && !cpu.X86.HasAVX2 { // false off amd64 too
			fmt.Fprintf(w, "%-32s skipped  (in the AVX2 loops; this machine or build has none, so the suite runs the Go loops)\n", m.name)
			continue
		}
		v := try(scratch, m, timeout)
		vs = append(vs, v)
		fmt.Fprintln(w, v.line())
	}
	return summary(w, vs)
}

func (v verdict) line() string {
	switch {
	case v.err != nil:
		return fmt.Sprintf("%-32s ERROR    %s", v.m.name, v.err)
	case v.killed:
		return fmt.Sprintf("%-32s killed   %6.1fs  by %s", v.m.name, v.took.Seconds(), v.by)
	}
	return fmt.Sprintf("%-32s SURVIVED %6.1fs  (%s)", v.m.name, v.took.Seconds(), v.m.why)
}

func summary(w io.Writer, vs []verdict) error {
	bad := 0
	fmt.Fprintf(w, "\n%-32s %-8s %7s  %s\n", "mutant", "verdict", "seconds", "killed by")
	for _, v := range vs {
		verdict, by := "killed", v.by
		switch {
		case v.err != nil:
			verdict, by = "ERROR", v.err.Error()
			bad++
		case !v.killed:
			verdict, by = "SURVIVED", v.m.why
			bad++
		}
		fmt.Fprintf(w, "%-32s %-8s %7.1f  %s\n", v.m.name, verdict, v.took.Seconds(), by)
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d mutants survived or could not run", bad, len(vs))
	}
	fmt.Fprintf(w, "mutate: PASS (%d mutants, all killed)\n", len(vs))
	return nil
}

// try applies m in scratch, runs its suite and restores the file.
func try(scratch string, m mutant, timeout time.Duration) verdict {
	v := verdict{m: m}
	for _, e := range m.edits() {
		restore, err := apply(scratch, e)
		if err != nil {
			v.err = err
			return v
		}
		defer restore()
	}
	pkgs := m.pkgs
	if len(pkgs) == 0 {
		pkgs = fast
	}
	start := time.Now()
	out, killed, err := runSuite(scratch, pkgs, timeout)
	v.took = time.Since(start)
	if err != nil {
		v.err = err
		return v
	}
	if !killed {
		return v // every test passed: survived
	}
	v.killed, v.by = true, firstFailure(out)
	return v
}

// runSuite runs go test over pkgs in dir and stops it at the first
// failure: one failing test kills the mutant, the rest need not run.
// killed reports whether anything failed (a test, a build, the timeout).
func runSuite(dir string, pkgs []string, timeout time.Duration) (out []byte, killed bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append([]string{"test", "-count=1", "-failfast", "-timeout", timeout.String()}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the test binaries too
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, false, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	var buf bytes.Buffer
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	failing := 0
	for sc.Scan() {
		buf.Write(sc.Bytes())
		buf.WriteByte('\n')
		l := sc.Text()
		if strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "--- FAIL") || strings.HasPrefix(l, "panic: ") {
			failing++
		}
		// The failure block is out once its package line ("FAIL\tpkg")
		// or a panic's trace arrived: stop every package.
		if failing > 0 && (strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "ok  \t")) {
			cancel()
		}
	}
	werr := cmd.Wait()
	if ctx.Err() == context.DeadlineExceeded {
		buf.WriteString("--- FAIL: the suite's timeout (" + timeout.String() + ")\n")
		return buf.Bytes(), true, nil
	}
	return buf.Bytes(), werr != nil || failing > 0, nil
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

var (
	failLine  = regexp.MustCompile(`^\s*--- FAIL: (\S+)`)
	panicLine = regexp.MustCompile(`^panic: `)
	buildLine = regexp.MustCompile(`^# |\[build failed\]|\[setup failed\]`)
)

// firstFailure names what failed first in go test output: the deepest
// failing test of the first failure block, or the build failure.
func firstFailure(out []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var tests []string
	for sc.Scan() {
		l := sc.Text()
		if m := failLine.FindStringSubmatch(l); m != nil {
			tests = append(tests, m[1])
			continue
		}
		if len(tests) > 0 {
			break
		}
		if buildLine.MatchString(l) {
			return "BUILD FAILED (the mutant does not compile): " + strings.TrimSpace(l)
		}
		if panicLine.MatchString(l) {
			return "a panic: " + strings.TrimSpace(l)
		}
	}
	if len(tests) == 0 {
		return "a failing package (no test named)"
	}
	deepest := tests[0]
	for _, t := range tests {
		if strings.Count(t, "/") > strings.Count(deepest, "/") && strings.HasPrefix(t, strings.Split(deepest, "/")[0]) {
			deepest = t
		}
	}
	return deepest
}

// copyRepo copies the files git knows (tracked, and untracked but not
// ignored) into a fresh scratch directory.
func copyRepo() (string, error) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not in a git checkout: %v", err)
	}
	src := strings.TrimSpace(string(root))
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
