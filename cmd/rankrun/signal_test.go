package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rankrun/rankrun/diag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rankrunProcess is this test binary started as rankrun (see TestMain).
func rankrunProcess(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), subprocessEnv+"=1")
	return cmd
}

// waitExit waits for cmd with a deadline, killing it (by its pid) past it.
func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("rankrun did not end within %v", within)
		return -1
	}
}

// A real signal to a real rankrun process: the run ends early, every rank
// stops, the partial report (marked interrupted) and the trace are written,
// and the exit code is 128 + the signal.
func TestRunInterruptedBySignal(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
		code int
	}{{syscall.SIGINT, "SIGINT", 130}, {syscall.SIGTERM, "SIGTERM", 143}} {
		t.Run(tc.name, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "trace.json")
			dumps := filepath.Join(t.TempDir(), "dumps")
			cmd := rankrunProcess("run", "--requests", "1000000", "--layers", "1", "--kv-heads", "1", "--head-dim", "8",
				"--json", "--trace", trace, "--log-level", "debug", "--dump-dir", dumps)
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			stderr, err := cmd.StderrPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			// Progress first: every rank has started its loop and requests
			// have finished (debug log lines), then the signal.
			sc := bufio.NewScanner(stderr)
			started, finished := 0, 0
			for (started < 5 || finished < 2) && sc.Scan() {
				started += strings.Count(sc.Text(), "executor starting")
				finished += strings.Count(sc.Text(), "requests finished")
			}
			require.Equal(t, 5, started, "every rank starts")
			drained := make(chan struct{})
			var rest bytes.Buffer
			go func() { _, _ = io.Copy(&rest, stderr); close(drained) }()
			require.NoError(t, cmd.Process.Signal(tc.sig))
			select { // stderr closes when the process ends
			case <-drained:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("rankrun did not end within 30 s of the signal")
			}
			code := waitExit(t, cmd, 30*time.Second)
			assert.Equal(t, tc.code, code)

			var r runReport
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &r), "stdout is one JSON report:\n%s", stdout.String())
			requireFields(t, &r)
			require.NotNil(t, r.Error)
			assert.Equal(t, "interrupted", r.Error.Kind)
			assert.Contains(t, r.Error.Message, tc.name)
			assert.Empty(t, r.Error.Ranks, "no rank failed")
			assert.Positive(t, *r.RequestsCompleted, "what was measured before the signal")
			assert.Less(t, *r.RequestsCompleted, 1000000)
			var ranks []map[string]any
			require.NoError(t, json.Unmarshal(r.RankReports, &ranks))
			assert.Len(t, ranks, 5, "every rank ended and reported")
			events := readTrace(t, trace)
			assert.Greater(t, len(events), 10)
			requireNested(t, events)
			// Every rank dumped, as interrupted by the signal, and the
			// message says where.
			ds, err := diag.ReadDir(dumps)
			require.NoError(t, err)
			assert.Len(t, ds, 5)
			for _, d := range ds {
				assert.Equal(t, "signal", d.ErrorKind, "rank %d", d.WorldRank)
			}
			assert.Contains(t, rest.String(), "failure dumps (one per rank that could write one) are in "+dumps)
		})
	}
}

// Write errors on stdout are errors: a report that cannot be written
// fails the command.
func TestRunStdoutFull(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	for _, args := range [][]string{{"run", "--requests", "4"}, {"run", "--requests", "4", "--json"}} {
		cmd := rankrunProcess(args...)
		cmd.Stdout = full
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		code := waitExit(t, cmd, 60*time.Second)
		assert.Equal(t, 1, code, "%v: stderr %s", args, stderr.String())
		assert.Contains(t, stderr.String(), "no space left on device", "%v", args)
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after <= 0 {
		return 0, errors.New("disk on fire")
	}
	w.after--
	return len(p), nil
}

// A text report written in many small writes fails on any of them, not
// only on the first.
func TestRunStdoutWriteErrorMidReport(t *testing.T) {
	for _, jsonOut := range []bool{false, true} {
		args := []string{"run", "--requests", "4"}
		after := 3 // the text report's fourth write
		if jsonOut {
			args, after = append(args, "--json"), 0 // one write
		}
		var errOut bytes.Buffer
		code := realMain(args, &failingWriter{after: after}, &errOut)
		assert.Equal(t, 1, code, "%v", args)
		assert.Contains(t, errOut.String(), "writing the report to stdout: disk on fire", "%v", args)
	}
}

// signalAfter starts cmd, waits until its stderr has shown marker n
// times (progress, from debug log lines), sends it sig, and returns its
// stdout, the rest of its stderr and its exit code; 30 s bound each wait.
func signalAfter(t *testing.T, cmd *exec.Cmd, marker string, n int, sig syscall.Signal) (stdout, rest *bytes.Buffer, code int) {
	t.Helper()
	stdout, rest = new(bytes.Buffer), new(bytes.Buffer)
	cmd.Stdout = stdout
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stderr)
	seen := 0
	for seen < n && sc.Scan() {
		seen += strings.Count(sc.Text(), marker)
	}
	require.Equal(t, n, seen, "%q lines before the signal", marker)
	drained := make(chan struct{})
	go func() { _, _ = io.Copy(rest, stderr); close(drained) }()
	require.NoError(t, cmd.Process.Signal(sig))
	select { // stderr closes when the process ends
	case <-drained:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("%s did not end within 30 s of the signal", cmd.Args[0])
	}
	return stdout, rest, waitExit(t, cmd, 30*time.Second)
}

// SIGINT or SIGTERM to a running sweep ends it with what was done: the
// cells finished before the signal in the table, a valid CSV, JSON and
// plot, the cut named on stderr and in the table's title, exit 128 + the
// signal. Also when the sweep was started with SIGINT ignored, as a
// shell's background job is.
func TestSweepInterruptedKeepsFinishedCells(t *testing.T) {
	const cells = 40
	var arrivals []string
	for c := 1; c <= cells; c++ {
		arrivals = append(arrivals, fmt.Sprintf("closed=%d", c))
	}
	for _, tc := range []struct {
		name    string
		sig     syscall.Signal
		code    int
		ignored bool // started with SIGINT ignored (sh: trap '' INT)
	}{{"SIGINT", syscall.SIGINT, 130, false}, {"SIGTERM", syscall.SIGTERM, 143, false}, {"SIGINT in the background", syscall.SIGINT, 130, true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			csvPath, jsonPath, plotPath := filepath.Join(dir, "s.csv"), filepath.Join(dir, "s.json"), filepath.Join(dir, "s.svg")
			args := []string{"sweep", "--backend", "sim", "--jobs", "1", "--pair", "tp=1/tp=2", "--requests", "64",
				"--arrival", strings.Join(arrivals, ","), "--csv", csvPath, "--json", jsonPath, "--plot", plotPath, "--log-level", "debug"}
			cmd := rankrunProcess(args...)
			if tc.ignored {
				cmd = exec.Command("sh", append([]string{"-c", `trap '' INT; exec "$0" "$@"`, os.Args[0]}, args...)...)
				cmd.Env = append(os.Environ(), subprocessEnv+"=1")
			}
			// Progress first: three cells finished (debug log lines).
			stdout, rest, code := signalAfter(t, cmd, "sweep run finished", 3, tc.sig)
			assert.Equal(t, tc.code, code)

			m := regexp.MustCompile(`rankrun: sweep: interrupted by (\S+) after (\d+) of 40 cells; the table and outputs hold the \d+ finished`).FindStringSubmatch(rest.String())
			require.NotNil(t, m, "stderr: %s", rest.String())
			assert.Equal(t, signalName(tc.sig), m[1])
			k, err := strconv.Atoi(m[2])
			require.NoError(t, err)
			assert.GreaterOrEqual(t, k, 3, "the cells finished before the signal")
			assert.Less(t, k, cells, "the signal cut the sweep short")
			assert.Contains(t, stdout.String(), fmt.Sprintf("(%d of 40 cells finished before the interrupt)", k))

			f, err := os.Open(csvPath)
			require.NoError(t, err)
			defer f.Close()
			rows, err := csv.NewReader(f).ReadAll()
			require.NoError(t, err, "a valid CSV")
			assert.Len(t, rows, 1+k, "a header and one row per finished cell")
			require.Equal(t, "requests_completed", rows[0][3])
			for i, row := range rows[1:] {
				assert.Equal(t, fmt.Sprintf("closed=%d", i+1), row[2], "the finished cells, in order")
				assert.Equal(t, "64", row[3], "a cell the signal cut short is not in the CSV")
				assert.Equal(t, "ok", row[18], "nor one marked interrupted")
			}
			b, err := os.ReadFile(jsonPath)
			require.NoError(t, err)
			var reports []json.RawMessage
			require.NoError(t, json.Unmarshal(b, &reports), "valid JSON")
			assert.Len(t, reports, k)
			svg, err := os.ReadFile(plotPath)
			require.NoError(t, err)
			assert.Contains(t, string(svg), "<svg")
			assert.True(t, strings.HasSuffix(strings.TrimSpace(string(svg)), "</svg>"), "a whole SVG")
		})
	}
}

// SIGINT or SIGTERM to a running explore ends it with its summary: how
// many schedules passed, which seeds, and the --start to resume from; the
// schedule the signal cut short is neither counted nor called a failure.
func TestExploreInterruptedSaysWhereToResume(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(signalName(tc.sig), func(t *testing.T) {
			cmd := rankrunProcess("explore", "--ctx", "tp=2", "--gen", "tp=2", "--requests", "4", "--seeds", "100000", "--start", "7", "--log-level", "debug")
			stdout, _, code := signalAfter(t, cmd, "explore schedule finished", 3, tc.sig)
			assert.Equal(t, tc.code, code)
			m := regexp.MustCompile(`^explore: interrupted by (\S+) after (\d+) schedules \(random strategy, seeds 7\.\.(\d+)\) in [0-9.]+ s: no failure; resume with --start (\d+)\n$`).
				FindStringSubmatch(stdout.String())
			require.NotNil(t, m, "stdout: %q", stdout.String())
			assert.Equal(t, signalName(tc.sig), m[1])
			n, _ := strconv.Atoi(m[2])
			last, _ := strconv.Atoi(m[3])
			resume, _ := strconv.Atoi(m[4])
			assert.GreaterOrEqual(t, n, 3)
			assert.Equal(t, 7+n-1, last)
			assert.Equal(t, 7+n, resume, "resume at the first schedule not tried to its end")
		})
	}
}
