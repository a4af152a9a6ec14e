package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
			cmd := rankrunProcess("run", "--requests", "1000000", "--layers", "1", "--kv-heads", "1", "--head-dim", "8",
				"--json", "--trace", trace, "--log-level", "debug")
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
			go func() { _, _ = io.Copy(io.Discard, stderr); close(drained) }()
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
