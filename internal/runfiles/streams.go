package runfiles

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/rankrun/rankrun/executor"
)

// streamBuffer bounds what a stream holds before it writes: memory for a
// run's trace and records does not grow with the run.
const streamBuffer = 1 << 20

// Streams writes --trace and --requests-out as the run goes: it is the
// run's executor.Sink, shared by the ranks of this process. Each file is
// written to a temporary beside its path and renamed over it at the end,
// so a reader never sees half a file, even after an interrupt. What the
// report still holds at the end (the other ranks' events under MPI, where
// they travel to world rank 0 with the rank reports) is appended then.
type Streams struct {
	mu       sync.Mutex
	trace    *stream
	requests *stream
	events   int // trace events written (a comma before each but the first)
}

// stream is one output file being written.
type stream struct {
	flag, path string
	f          *os.File
	w          *bufio.Writer
	err        error // the first failure; later writes are dropped
}

func openStream(flag, path string) (*stream, error) {
	f, err := CreateTemp(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return &stream{flag: flag, path: path, f: f, w: bufio.NewWriterSize(f, streamBuffer)}, nil
}

func (s *stream) write(b []byte) {
	if s.err == nil {
		_, s.err = s.w.Write(b)
	}
}

// commit flushes and renames the file over its path; after a failure it
// removes the temporary and says why.
func (s *stream) commit() error {
	err := errors.Join(s.err, s.w.Flush(), s.f.Close())
	if err == nil {
		err = os.Rename(s.f.Name(), s.path)
	}
	if err != nil {
		_ = os.Remove(s.f.Name())
		return fmt.Errorf("%s %s: %w", s.flag, s.path, err)
	}
	return nil
}

func (s *stream) discard() {
	_ = s.f.Close()
	_ = os.Remove(s.f.Name())
}

// Open starts the files asked for, --trace and --requests-out (paths, ""
// when not asked for); nil when none is.
func Open(trace, requests string) (*Streams, error) {
	if trace == "" && requests == "" {
		return nil, nil
	}
	ss := &Streams{}
	var err error
	if trace != "" {
		if ss.trace, err = openStream("--trace", trace); err != nil {
			return nil, err
		}
		// Chrome trace format, object form: the events follow as they
		// come; the rank tracks' names and the closing bracket at the end.
		ss.trace.write([]byte(`{"displayTimeUnit":"ms","traceEvents":[` + "\n"))
	}
	if requests != "" {
		if ss.requests, err = openStream("--requests-out", requests); err != nil {
			ss.Discard()
			return nil, err
		}
	}
	return ss, nil
}

// Record writes one request's record as a line of JSON (JSON Lines), in
// the order the requests finish.
func (ss *Streams) Record(q executor.RequestRecord) {
	b, err := json.Marshal(&q)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.put(ss.requests, err, b, []byte("\n"))
}

// Event writes one trace event.
func (ss *Streams) Event(ev executor.TraceEvent) {
	ss.event(ev)
}

func (ss *Streams) event(ev any) {
	b, err := json.Marshal(ev)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.trace != nil && ss.events > 0 {
		ss.trace.write([]byte(",\n"))
	}
	if ss.put(ss.trace, err, b) {
		ss.events++
	}
}

// put writes parts to s (held under ss.mu), keeping err, a failed
// encoding, as s's error; it reports whether s is open (nil: closed, or
// never asked for, and the write is dropped).
func (ss *Streams) put(s *stream, err error, parts ...[]byte) bool {
	if s == nil {
		return false
	}
	if err != nil && s.err == nil {
		s.err = err
	}
	for _, p := range parts {
		s.write(p)
	}
	return true
}

// Finish appends what rep still holds (records and events that travelled
// with the rank reports), names every rank's track, writes both files
// whole and drops the events from rep (the report carries none).
func (ss *Streams) Finish(rep *executor.Report) error {
	if ss.requests != nil {
		for i := range rep.Requests {
			ss.Record(rep.Requests[i])
		}
	}
	if ss.trace != nil {
		// Metadata events carry ts 0: the format does not need it, but
		// strict readers of the trace event format expect every event to
		// have one.
		type meta struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			TS   float64        `json:"ts"`
			PID  int            `json:"pid"`
			TID  int            `json:"tid"`
			Args map[string]any `json:"args"`
		}
		ss.event(meta{Name: "process_name", Ph: "M", Args: map[string]any{"name": fmt.Sprintf("rankrun ctx %s -> gen %s", rep.Ctx, rep.Gen)}})
		for _, rr := range rep.Ranks_ {
			ss.event(meta{Name: "thread_name", Ph: "M", TID: rr.WorldRank,
				Args: map[string]any{"name": fmt.Sprintf("%s rank %d (world %d)", rr.Role, rr.Rank, rr.WorldRank)}})
			for _, ev := range rr.Trace {
				ss.event(ev)
			}
		}
	}
	for i := range rep.Ranks_ {
		rep.Ranks_[i].Trace = nil
	}
	// Closed under the lock: an event that comes later is dropped (Event
	// finds no file), never written after the closing bracket.
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.trace != nil {
		ss.trace.write([]byte("\n]}\n"))
	}
	var errs []error
	for _, s := range []*stream{ss.trace, ss.requests} {
		if s != nil {
			errs = append(errs, s.commit())
		}
	}
	ss.trace, ss.requests = nil, nil
	return errors.Join(errs...)
}

// Discard removes the files begun, when the run left no report to finish
// them with.
func (ss *Streams) Discard() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range []*stream{ss.trace, ss.requests} {
		if s != nil {
			s.discard()
		}
	}
	ss.trace, ss.requests = nil, nil
}
