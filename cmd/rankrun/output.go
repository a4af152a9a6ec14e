package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/runfiles"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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
	streams *runfiles.Streams
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
		if err := runfiles.CheckWritable(probe); err != nil {
			return usagef("--dump-dir %s: %v", o.dumps, err)
		}
		_ = os.Remove(probe)
	}
	for _, p := range []struct{ flag, path string }{{"--trace", o.trace}, {"--requests-out", o.requests}} {
		if p.path == "" {
			continue
		}
		if err := runfiles.ProbeWritable(p.path); err != nil { // leaves no empty file behind
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
		o.streams.Discard()
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
		ss, err = runfiles.Open(o.trace, o.requests)
	}
	if ss != nil {
		err = ss.Finish(rep)
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
