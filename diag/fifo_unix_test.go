//go:build unix

package diag

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A named pipe beside the dumps (PyTorch's nccl_trace_rank_N.pipe, made
// with TORCH_NCCL_DEBUG_INFO_PIPE_FILE) is passed over, not opened: a read
// of it would wait for a writer forever. Read on its own, or through a
// link, it is refused in one line.
func TestReadDirSkipsFIFO(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(fixture("missing", 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nccl_trace_rank_0"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(dir, "nccl_trace_rank_0.pipe")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	type result struct {
		dumps []*Dump
		bad   []Unreadable
		err   error
		file  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.dumps, r.bad, r.err = ReadDirSkipping(dir)
		_, r.file = ReadFile(pipe)
		done <- r
	}()
	select {
	case r := <-done:
		if r.err != nil || len(r.dumps) != 1 || len(r.bad) != 0 {
			t.Errorf("a dump and a FIFO: %d dumps, unreadable %+v, %v; want the dump alone", len(r.dumps), r.bad, r.err)
		}
		want := "diag: " + pipe + ": a named pipe (FIFO), not a regular file: a dump is a file"
		if r.file == nil || r.file.Error() != want {
			t.Errorf("ReadFile of a FIFO: %v, want %s", r.file, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a directory with a FIFO in it has not ended in 10 s")
	}

	// A link to the FIFO is followed, and listed as not a dump.
	if err := os.Symlink(pipe, filepath.Join(dir, "nccl_trace_rank_1")); err != nil {
		t.Skipf("symlink: %v", err)
	}
	go func() {
		var r result
		r.dumps, r.bad, r.err = ReadDirSkipping(dir)
		done <- r
	}()
	select {
	case r := <-done:
		if r.err != nil || len(r.dumps) != 1 || len(r.bad) != 1 || !strings.Contains(r.bad[0].Why, "a named pipe (FIFO)") {
			t.Errorf("a dump and a link to a FIFO: %d dumps, unreadable %+v, %v", len(r.dumps), r.bad, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a directory with a link to a FIFO in it has not ended in 10 s")
	}
}
