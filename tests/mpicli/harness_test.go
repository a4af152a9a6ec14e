//go:build mpirun

package mpicli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The binaries every test runs, built once by TestMain.
var (
	mpiBin   string // bin/rankrun-mpi: go build -tags mpi
	noMPIBin string // the same CLI without MPI
)

// jobBound bounds one mpirun job: a job that outlives it is a hang.
const jobBound = 120 * time.Second

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if _, err := exec.LookPath("mpirun"); err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "mpicli: mpirun not found and CI=true (MPI tests are never skipped in CI): make mpi-deps installs Open MPI")
			return 1
		}
		fmt.Fprintln(os.Stderr, "mpicli: SKIPPED: mpirun not found (make mpi-deps installs Open MPI)")
		return 0
	}
	for k, v := range map[string]string{"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_pml": "ob1",
		"OMPI_MCA_btl_vader_single_copy_mechanism": "none"} {
		os.Setenv(k, v)
	}
	if os.Getenv("CGO_CFLAGS") == "" {
		os.Setenv("CGO_CFLAGS", "-O2 -g -Wno-deprecated-declarations") // go-nvml's and Open MPI's deprecations
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpicli:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "mpicli")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpicli:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	mpiBin, noMPIBin = filepath.Join(root, "bin", "rankrun-mpi"), filepath.Join(tmp, "rankrun")
	for _, b := range [][]string{{"-tags", "mpi", "-o", mpiBin}, {"-o", noMPIBin}} {
		cmd := exec.Command("go", append(append([]string{"build"}, b...), "./cmd/rankrun")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "mpicli: go build %v: %v\n%s", b, err, out)
			return 1
		}
	}
	return m.Run()
}

// job is one finished mpirun (or plain) process: its outputs and exit code.
type job struct {
	stdout, stderr string
	code           int
}

func (j job) String() string {
	return fmt.Sprintf("exit %d\n--- stdout (%d bytes)\n%s\n--- stderr (%d bytes)\n%s", j.code, len(j.stdout), tail(j.stdout), len(j.stderr), tail(j.stderr))
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

// mpirunArgs is mpirun's own options for every job here, then args.
func mpirunArgs(args ...string) []string {
	return append([]string{"--oversubscribe", "--bind-to", "none"}, args...)
}

// runJob runs name args to the end, bounded by jobBound: past it the job is
// signalled (mpirun passes SIGTERM on to its ranks), killed 10 s later, and
// the test fails as a hang.
func runJob(t *testing.T, name string, args ...string) job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // a test binary that dies takes its job along
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	j := job{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %s: still running after %v (a hang)\n%v", name, strings.Join(args, " "), jobBound, j)
	case errors.As(err, &ee):
		j.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return j
}

// mpirun runs one job of np ranks of bin with args.
func mpirun(t *testing.T, np int, bin string, args ...string) job {
	t.Helper()
	return runJob(t, "mpirun", mpirunArgs(append([]string{"-np", strconv.Itoa(np), bin}, args...)...)...)
}

// decode parses a JSON document into v, failing the test with the job.
func decode(t *testing.T, doc string, v any, j job) {
	t.Helper()
	if err := json.Unmarshal([]byte(doc), v); err != nil {
		t.Fatalf("not one JSON document: %v\n%v", err, j)
	}
}

// report is what these tests read of a run's JSON report.
type report struct {
	Backend           string  `json:"backend"`
	Ranks             int     `json:"ranks"`
	WallSeconds       float64 `json:"wall_seconds"`
	DurationS         float64 `json:"duration_s"`
	Scheduler         string  `json:"scheduler"`
	RequestsCompleted int     `json:"requests_completed"`
	RequestsFailed    int     `json:"requests_failed"`
	RequestsCancelled int     `json:"requests_cancelled"`
	BytesMoved        int64   `json:"bytes_moved"`
	BytesVerified     int64   `json:"bytes_verified"`
	LeakedBlocks      int     `json:"leaked_blocks"`
	PinnedAtEnd       int     `json:"pinned_blocks_at_end"`
	TTFT              struct {
		N int `json:"n"`
	} `json:"ttft_ms"`
	Errors    []string `json:"errors"`
	Error     *runErr  `json:"error"`
	Instances []struct {
		Role          string `json:"role"`
		Iterations    int    `json:"iterations"`
		PrefillChunks int    `json:"prefill_chunks"`
	} `json:"instances"`
	MissingRanks  []int  `json:"missing_ranks"`
	CountsPartial string `json:"counts_partial"`
}

type runErr struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Ranks   []int  `json:"ranks"`
}

// requestRecord is one line of --requests-out.
type requestRecord struct {
	ID    int    `json:"id"`
	State string `json:"state"`
}

// background is a job started and left running, its outputs in files.
type background struct {
	cmd            *exec.Cmd
	stdout, stderr string        // paths
	done           chan struct{} // closed once the job ended; err is then its Wait's
	err            error
}

// startJob starts mpirun args in the background, its outputs in dir.
func startJob(t *testing.T, dir string, args ...string) *background {
	t.Helper()
	b := &background{stdout: filepath.Join(dir, "out"), stderr: filepath.Join(dir, "err"), done: make(chan struct{})}
	so, err := os.Create(b.stdout)
	if err != nil {
		t.Fatal(err)
	}
	se, err := os.Create(b.stderr)
	if err != nil {
		t.Fatal(err)
	}
	b.cmd = exec.Command("mpirun", mpirunArgs(args...)...)
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	b.cmd.Stdout, b.cmd.Stderr = so, se
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b.err = b.cmd.Wait()
		so.Close()
		se.Close()
		close(b.done)
	}()
	t.Cleanup(func() {
		// A job still running (its test failed early) is ended as a user
		// would: SIGTERM, which mpirun passes on to its ranks, then, past
		// the longest kill window here, SIGKILL.
		select {
		case <-b.done:
			return
		default:
		}
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(15 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	})
	return b
}

// waitFor polls cond every 100 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// progressed reports whether every one of n ranks started and requests
// finished (the debug log lines of a run with --log-level debug).
func (b *background) progressed(n int) bool {
	e, _ := os.ReadFile(b.stderr)
	return bytes.Count(e, []byte("executor starting")) >= n && bytes.Contains(e, []byte("requests finished"))
}

// wait waits up to d for the job to end and returns it.
func (b *background) wait(t *testing.T, d time.Duration) job {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(d):
		t.Fatalf("mpirun did not end within %v", d)
	}
	err := b.err
	so, _ := os.ReadFile(b.stdout)
	se, _ := os.ReadFile(b.stderr)
	j := job{stdout: string(so), stderr: string(se)}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		j.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return j
}

// processOfWorldRank finds the process of world rank r among the children
// of the mpirun whose pid is parent (Open MPI sets OMPI_COMM_WORLD_RANK in
// each rank's environment), so no other job's rank is ever picked.
func processOfWorldRank(parent, r int) (int, bool) {
	dirs, _ := os.ReadDir("/proc")
	want := []byte("OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r))
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || parentOf(pid) != parent {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				return pid, true
			}
		}
	}
	return 0, false
}

// parentOf is pid's parent pid from /proc/PID/stat (its fourth field,
// after the command name in parentheses), or -1.
func parentOf(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return -1
	}
	p, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return p
}

// lines counts the lines of s that start with prefix.
func lines(s, prefix string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// decodeLine parses one JSON line.
func decodeLine(b []byte, v any) error { return json.Unmarshal(b, v) }

// regexpQuote quotes s for a regular expression.
func regexpQuote(s string) string { return regexp.QuoteMeta(s) }

// requireKeys fails unless the job's stdout is a JSON object with every
// one of keys (null counts as present).
func requireKeys(t *testing.T, j job, keys ...string) {
	t.Helper()
	var m map[string]json.RawMessage
	decode(t, j.stdout, &m, j)
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("the report has no %q\n%v", k, j)
		}
	}
}
