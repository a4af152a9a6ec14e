package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rankrun/rankrun/executor"
)

// outputs are where one run's results go: the report on stdout (text or
// JSON), and optionally a trace and the per-request records.
type outputs struct {
	json     bool
	trace    string // --trace FILE: Chrome trace of the run
	requests string // --requests-out FILE: one JSON record per request
	dumps    string // --dump-dir DIR: every failed rank's dump
	// brief: the report without rank_reports, JSON unindented. After a
	// signal mpirun forwards only ~10 KB more of a rank's output (it stops
	// reading while it tears the job down): the report must fit.
	brief bool
	// streams, when open, receives the run's records and events as they
	// happen (the run's executor.Sink).
	streams *streams
}

// check fails before the run, not after it, on a path that cannot be
// written or one given twice.
func (o outputs) check() error {
	if o.trace != "" && o.trace == o.requests {
		return usagef("--requests-out %s: the same file as --trace", o.requests)
	}
	if o.dumps != "" {
		if err := os.MkdirAll(o.dumps, 0o755); err != nil {
			return usagef("--dump-dir: %v", err)
		}
		if old, _ := filepath.Glob(filepath.Join(o.dumps, "rank-*.json")); len(old) > 0 {
			return usagef("--dump-dir %s holds dumps of an earlier job (%s): move them away or choose another directory", o.dumps, filepath.Base(old[0]))
		}
		probe := filepath.Join(o.dumps, fmt.Sprintf(".rankrun-check-%d", os.Getpid()))
		if err := checkWritable(probe); err != nil {
			return usagef("--dump-dir %s: %v", o.dumps, err)
		}
		_ = os.Remove(probe)
	}
	for _, p := range []struct{ flag, path string }{{"--trace", o.trace}, {"--requests-out", o.requests}} {
		if p.path == "" {
			continue
		}
		if err := probeWritable(p.path); err != nil { // leaves no empty file behind
			return usagef("%s: %v", p.flag, err)
		}
	}
	return nil
}

// finish writes what the run left, whole or partial: the trace, the
// request records and the report (each also after a run error: what was
// measured up to it). A failed write is an error of the command. The
// result is the exit: 128 + signal after an interrupt, 1 after a run
// error, a failed write or a report with errors or leaks, else 0.
func (o outputs) finish(ctx context.Context, rep *executor.Report, runErr error, stdout io.Writer) error {
	runErr = o.withDumps(runErr)
	var errs []error
	if rep == nil && o.streams != nil {
		o.streams.discard()
	}
	if rep != nil {
		if err := o.writeFiles(rep); err != nil {
			// The report says so too: it is printed after the files.
			errs = append(errs, err)
			rep.Errors = append(rep.Errors, strings.Split(err.Error(), "\n")...)
		}
		if o.brief {
			rep.Ranks_ = nil
		}
		if err := printReport(rep, o.json, !o.brief, stdout); err != nil {
			errs = append(errs, fmt.Errorf("writing the report to stdout: %w", err))
		}
	}
	werr := errors.Join(errs...)
	if ie, ok := interrupted(ctx, runErr); ok {
		msg := ie.Error() + ": the report is partial"
		if werr != nil {
			msg += "; " + werr.Error()
		}
		var de dumpsError
		if errors.As(runErr, &de) {
			msg += "\n" + de.where()
		}
		return exitError{code: ie.code(), msg: msg}
	}
	if runErr != nil || werr != nil {
		return errors.Join(runErr, werr)
	}
	if !rep.OK() {
		return exitError{code: 1, msg: fmt.Sprintf("run ended with %d errors, %d leaked blocks", len(rep.Errors), rep.LeakedBlocks)}
	}
	return nil
}

// writeFiles finishes the trace and the request records, when asked
// for: those streamed during the run (o.streams) and those rep still
// holds; it drops the trace events from rep (the report carries none).
func (o outputs) writeFiles(rep *executor.Report) error {
	ss := o.streams
	var err error
	if ss == nil {
		ss, err = o.open()
	}
	if ss != nil {
		err = ss.finish(rep)
	}
	for i := range rep.Ranks_ {
		rep.Ranks_[i].Trace = nil // never in the report, even when a file failed
	}
	return err
}

// emit prints the report and writes the trace; a report with errors or
// leaks makes the exit code 1.
func emit(rep *executor.Report, jsonOut bool, traceFile string, stdout io.Writer) error {
	return outputs{json: jsonOut, trace: traceFile}.finish(context.Background(), rep, nil, stdout)
}

// errWriter keeps the first write error, so a report written in many
// small writes fails as a whole.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func printReport(rep *executor.Report, jsonOut, indent bool, stdout io.Writer) error {
	w := &errWriter{w: stdout}
	if jsonOut {
		enc := json.NewEncoder(w)
		if indent {
			enc.SetIndent("", "  ")
		}
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.WriteText(w)
	}
	return w.err
}

func newLogger(level string, stderr io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: must be debug, info, warn or error", level)
	}
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.TimeEncoderOfLayout(time.StampMicro)
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(stderr), lvl)
	return zap.New(core), nil
}

func checkWritable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// probeWritable checks that path can be written, leaving no file behind
// that was not there before.
func probeWritable(path string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Remove(path)
}

// createTemp creates a new file beside path to be renamed over it, with
// the mode os.Create gives (0666 less the umask; os.CreateTemp's 0600
// would make every output private).
func createTemp(path string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d", filepath.Base(path), rand.Uint64()))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("no free temporary name beside %s", path)
}

// writeFile writes path through a temporary file in its directory and a
// rename, so a reader never sees half a file, even after an interrupt.
func writeFile(flag, path string, write func(w io.Writer) error) error {
	tmp, err := createTemp(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	bw := bufio.NewWriterSize(tmp, 1<<20)
	err = write(bw)
	err = errors.Join(err, bw.Flush(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return nil
}

// jsonUsageError prints, when the command line set --json, a refused
// command line as the report's error object on stdout (kind "usage"), so
// that a tool reading the JSON sees every failure; the line on stderr
// stays.
func jsonUsageError(err error, jsonOut bool, stdout io.Writer) {
	ue, usage := asUsage(err)
	if !jsonOut || !usage || quietRank() {
		return
	}
	b, merr := json.MarshalIndent(struct {
		Error executor.RunError `json:"error"`
	}{executor.RunError{Kind: "usage", Message: ue.Error(), Ranks: []int{}}}, "", "  ")
	if merr == nil {
		fmt.Fprintf(stdout, "%s\n", b)
	}
}

// dumpsError is a run error whose ranks wrote failure dumps: the message
// says where, and how to read them.
type dumpsError struct {
	err error
	dir string
}

func (e dumpsError) Error() string { return fmt.Sprintf("%v\n%s", e.err, e.where()) }

func (e dumpsError) where() string {
	return fmt.Sprintf("failure dumps (one per rank that could write one) are in %s: rankrun analyze %s", e.dir, e.dir)
}
func (e dumpsError) Unwrap() error { return e.err }

// withDumps names the dump directory in a run error, when the run had one
// and some rank wrote a dump there.
func (o outputs) withDumps(err error) error {
	if err == nil || o.dumps == "" {
		return err
	}
	var de dumpsError
	if errors.As(err, &de) {
		return err
	}
	if m, _ := filepath.Glob(filepath.Join(o.dumps, "rank-*.json")); len(m) == 0 {
		return err
	}
	return dumpsError{err: err, dir: o.dumps}
}

// jobID names this job in its dumps, the same on every rank: mpirun's job
// (PMIx namespace) under MPI, else this process and the time it started.
func jobID(backend string) string {
	if backend == "mpi" {
		for _, k := range []string{"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"} {
			if v := os.Getenv(k); v != "" {
				return "mpi-" + v
			}
		}
		return "" // unknown, but the same on every rank
	}
	return fmt.Sprintf("%s-%d-%d", backend, os.Getpid(), time.Now().UnixNano())
}
