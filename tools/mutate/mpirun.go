package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// mpiPkg is the package an MPI mutant's suite tests: the binding, built
// with -tags mpi and run under mpirun.
const mpiPkg = "./comm/mpi"

// mpiSuite is an MPI mutant's suite: the comm/mpi test binary under
// mpirun at each np, its tests filtered by pattern (-test.run).
type mpiSuite struct {
	nps     []int
	pattern string
}

func (s mpiSuite) String() string {
	np := make([]string, len(s.nps))
	for i, n := range s.nps {
		np[i] = fmt.Sprint(n)
	}
	return fmt.Sprintf("mpirun -np %s %s -test.run %s", strings.Join(np, ","), mpiPkg, s.pattern)
}

// haveMPI says why mpirun cannot run here, or "" when it can.
func haveMPI() string {
	if _, err := exec.LookPath("mpirun"); err != nil {
		return "mpirun is not on PATH (make mpi-deps installs Open MPI)"
	}
	return ""
}

// mpiEnv is what scripts/test-mpi.sh sets for every mpirun: root allowed
// (CI containers), ob1 over shared memory without the single-copy path
// (no CMA in containers).
var mpiEnv = []string{
	"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
	"OMPI_MCA_pml=ob1", "OMPI_MCA_btl_vader_single_copy_mechanism=none",
}

// mpiTest builds the comm/mpi test binary with -tags mpi in dir and runs
// it under mpirun at each of s's np, every rank's output going to its own
// file (mpirun --output-filename), each read through go tool test2json
// into one outcome: a test failed when it failed on any rank, or when a
// rank's process ended inside it (an abort, a crash). A failed build is
// the outcome's buildErr. stop, when not nil, is asked after each np:
// true skips the rest.
func mpiTest(dir, module string, s mpiSuite, timeout time.Duration, stop func(*outcome) bool) (run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	o := newOutcome(module)
	r := run{outcome: o, limit: timeout}
	bin := filepath.Join(dir, ".mutate-mpi.test")
	defer os.Remove(bin)
	build := exec.CommandContext(ctx, "go", "test", "-c", "-tags", "mpi", "-o", bin, mpiPkg)
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		r.exitFailed, r.deadline = true, ctx.Err() == context.DeadlineExceeded
		if !r.deadline {
			o.buildErr = firstCompilerLine(out)
		}
		return r, nil
	}
	pkgPath := module + "/" + strings.TrimPrefix(mpiPkg, "./")
	for _, np := range s.nps {
		outDir, err := os.MkdirTemp("", "rankrun-mutate-mpi-")
		if err != nil {
			return r, err
		}
		cmd := exec.CommandContext(ctx, "mpirun", "--oversubscribe", "--bind-to", "none", "-np", fmt.Sprint(np),
			"--merge-stderr-to-stdout", "--output-filename", outDir,
			bin, "-test.v=test2json", "-test.count=1", "-test.run", s.pattern, "-test.timeout", timeout.String())
		cmd.Dir = filepath.Join(dir, strings.TrimPrefix(mpiPkg, "./"))
		cmd.Env = append(os.Environ(), mpiEnv...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		var launcher bytes.Buffer
		cmd.Stdout, cmd.Stderr = &launcher, &launcher
		werr := cmd.Run()
		if werr != nil {
			r.exitFailed = true
		}
		if ctx.Err() == context.DeadlineExceeded {
			r.deadline = true
		}
		streams, err := rankStreams(outDir)
		if err == nil && len(streams) != np {
			err = fmt.Errorf("mpirun -np %d left %d rank outputs in %s (%s)", np, len(streams), outDir, first(strings.Split(strings.TrimSpace(launcher.String()), "\n")))
		}
		for _, f := range streams {
			if err == nil {
				err = readRankStream(o, pkgPath, f)
			}
		}
		os.RemoveAll(outDir)
		if err != nil {
			return r, err
		}
		if r.deadline || (stop != nil && stop(o)) {
			break
		}
	}
	return r, nil
}

// rankStreams lists the per-rank output files mpirun --output-filename
// wrote under dir (Open MPI 4: dir/1/rank.N/stdout), by rank.
func rankStreams(dir string) ([]string, error) {
	var fs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "stdout" {
			fs = append(fs, p)
		}
		return err
	})
	sort.Strings(fs)
	return fs, err
}

// readRankStream converts one rank's -test.v=test2json output into
// events (go tool test2json) and adds them to o. A test the stream
// started and never ended died with its process: it failed.
func readRankStream(o *outcome, pkgPath, file string) error {
	in, err := os.Open(file)
	if err != nil {
		return err
	}
	defer in.Close()
	conv := exec.Command("go", "tool", "test2json", "-p", pkgPath)
	conv.Stdin = in
	out, err := conv.Output()
	if err != nil {
		return fmt.Errorf("go tool test2json on %s: %v", file, err)
	}
	sub := newOutcome(o.module)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var started []testID
	for sc.Scan() {
		l := sc.Bytes()
		if ev, ok := parseEvent(l); ok && ev.Action == "run" {
			started = append(started, testID{sub.rel(ev.Package), ev.Test})
		}
		sub.add(l)
		o.add(l)
	}
	for _, id := range started {
		if !sub.ended[id] {
			o.ended[id] = true
			o.failed = append(o.failed, id)
		}
	}
	return sc.Err()
}

// firstCompilerLine is the first line of go build's output that is not
// a "# package" header.
func firstCompilerLine(out []byte) string {
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return "the build failed with no output"
}
