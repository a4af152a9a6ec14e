package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A write that fails (a file-size limit, as a full disk would) is said
// once per file, each line naming the tool, in the report's errors too,
// and leaves no file behind: no 0-byte --trace or --requests-out, no
// temporary. The run is a child process of the test binary, so that its
// file-size limit cannot fail the test binary's own writes.
func TestFailedWriteIsReported(t *testing.T) {
	type result struct {
		Code             int
		Out, Err, Trace  string
		Requests, SetErr string
	}
	if dir := os.Getenv("RANKRUN_TEST_FSIZE_DIR"); dir != "" { // the child
		var r result
		lim := syscall.Rlimit{Cur: 8 << 10, Max: 8 << 10}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			r.SetErr = err.Error()
		}
		r.Trace, r.Requests = filepath.Join(dir, "x.json"), filepath.Join(dir, "r.jsonl")
		r.Code, r.Out, r.Err = cli(t, "run", "--backend", "sim", "--requests", "64", "--trace", r.Trace, "--requests-out", r.Requests)
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFailedWriteIsReported$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RANKRUN_TEST_FSIZE_DIR="+dir)
	b, err := cmd.Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var r result
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &r), string(b))
	require.Empty(t, r.SetErr)
	require.Equal(t, 1, r.Code, r.Err)
	errLines := strings.Split(strings.TrimSpace(r.Err), "\n")
	require.Len(t, errLines, 2, r.Err)
	for _, l := range errLines {
		require.True(t, strings.HasPrefix(l, "rankrun: "), "every line names the tool: %q", l)
	}
	require.Contains(t, errLines[0], "--trace "+r.Trace+": ")
	require.Contains(t, errLines[1], "--requests-out "+r.Requests+": ")
	require.NotContains(t, r.Out, "errors                            none")
	require.Contains(t, r.Out, "file too large")
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left, "nothing left behind")
}
