package diag

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Format names the dump format a rankrun dump carries.
const Format = "rankrun-dump/1"

// Dump is what one rank knew when the job failed: its flight recorder, the
// guard values it recorded, its live transfer sessions, its pools, its last
// executor iterations and its goroutine stacks. A dump read from another
// tool (a PyTorch flight-recorder dump) fills what that format holds.
type Dump struct {
	Format string `json:"format"`
	Source string `json:"source"` // "rankrun" or "pytorch"
	// Version is the version of its format the dump's writer gives
	// (PyTorch's flight recorder: "2.10"); "" when it gives none.
	Version string `json:"version,omitempty"`
	// Job names the job that wrote the dump (the same on every rank of
	// it): a directory's dumps must all be one job's.
	Job       string `json:"job,omitempty"`
	WorldRank int    `json:"world_rank"`
	WorldSize int    `json:"world_size"` // 0 when the dump does not say
	Host      string `json:"host,omitempty"`
	PID       int    `json:"pid,omitempty"`
	// Backend is where the rank ran: "local", "sim", "mpi", or the tool
	// that wrote the dump.
	Backend string `json:"backend,omitempty"`
	// Error is the failure this rank saw, as its error reads.
	Error string `json:"error,omitempty"`
	// ErrorKind names it: "desync", "timeout", "stall", "deadlock",
	// "exit", "signal", "pinned", "error".
	ErrorKind string `json:"error_kind,omitempty"`
	// Timeout is the collective timeout this rank saw, when its failure
	// is one: where it waited and the ranks its stall inspector found had
	// never arrived (what the rank knew when it failed; a frozen rank that
	// mpirun wakes to end it may dump a later state of its own).
	Timeout *Timeout `json:"timeout,omitempty"`
	// Groups are the communicators the rank belongs to, each with its
	// members' world ranks in group-rank order.
	Groups []Group `json:"groups"`
	// Ops is the flight recorder, oldest first.
	Ops []Op `json:"ops"`
	// Unrecorded says the rank kept no flight recorder (an unchecked
	// run): no Ops, no guards, no Entered counts.
	Unrecorded bool `json:"unrecorded,omitempty"`
	// Pending are guard values recorded after the last collective, which
	// the rank's next collective decision depends on.
	Pending    []Guard     `json:"pending_guards,omitempty"`
	Sessions   []Session   `json:"sessions,omitempty"`
	Pools      []Pool      `json:"pools,omitempty"`
	Iterations []Iteration `json:"iterations,omitempty"`
	// Requests are what this rank saw of each request it still had, in
	// time: arrival, prefill, admission, its transfer session.
	Requests []RequestTimes `json:"requests,omitempty"`
	Stacks   string         `json:"stacks,omitempty"`

	// File is where the dump was read from (not written).
	File string `json:"-"`
}

// Timeout is where a rank waited when its collective timed out.
type Timeout struct {
	Group   string `json:"group"`
	Seq     uint64 `json:"seq"`
	Kind    string `json:"kind"`
	Site    string `json:"site,omitempty"`
	Missing []int  `json:"missing"` // world ranks that never arrived
}

// Group is one communicator: its name and its members' world ranks.
type Group struct {
	Name  string `json:"name"`
	Ranks []int  `json:"ranks"`
	// Entered is how many collectives the dumping rank had entered on
	// the group (0 when the dump does not say).
	Entered uint64 `json:"entered,omitempty"`
}

// Op is one flight-recorder entry.
type Op struct {
	Group string `json:"group"`
	Seq   uint64 `json:"seq"` // collective sequence on Group (0: point-to-point)
	Kind  string `json:"kind"`
	// Shape is the argument shape as a string ("count 4, sum"; sizes and
	// dtypes for PyTorch): equal on every rank of a matched collective.
	Shape string `json:"shape,omitempty"`
	Site  string `json:"site,omitempty"`
	// Path is the whole call path (rankrun: every frame outside the
	// collective plumbing, innermost first), when the dump has it.
	Path string `json:"path,omitempty"`
	Peer int    `json:"peer"` // point-to-point: the other rank in Group; -1 otherwise
	Tag  int    `json:"tag,omitempty"`
	// StartNS and EndNS are nanoseconds on the rank's clock (Unix time, or
	// virtual time in simulation); EndNS is 0 while in progress.
	StartNS int64   `json:"start_ns"`
	EndNS   int64   `json:"end_ns,omitempty"`
	Err     string  `json:"err,omitempty"`
	Guards  []Guard `json:"guards,omitempty"`
}

// P2P reports whether the op is point-to-point.
func (o Op) P2P() bool { return o.Seq == 0 && o.Peer >= 0 }

// InProgress reports whether the op had not ended when dumped.
func (o Op) InProgress() bool { return o.EndNS == 0 && o.Err == "" }

// Guard is a rank-local value a collective decision depended on.
type Guard struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Site  string `json:"site,omitempty"`
	// By and Of, in an analysis, say that only By of the Of ranks of a
	// side recorded this name (both 0 when every rank did).
	By int `json:"by,omitempty"`
	Of int `json:"of,omitempty"`
}

// String is "name=value", and "name=value (on 2 of 3 ranks)" for a side's
// value only some of its ranks recorded.
func (g Guard) String() string {
	if g.Of > 0 && g.By < g.Of {
		return fmt.Sprintf("%s=%s (on %d of %d ranks)", g.Name, g.Value, g.By, g.Of)
	}
	return g.Name + "=" + g.Value
}

// Session is one live transfer session.
type Session struct {
	Request       int64  `json:"request"`
	Role          string `json:"role"`  // "send" or "recv"
	Peers         []int  `json:"peers"` // world ranks of the other side
	State         string `json:"state"`
	BytesDone     int64  `json:"bytes_done"`
	BytesExpected int64  `json:"bytes_expected"`
	AgeNS         int64  `json:"age_ns"`
	Lease         string `json:"lease,omitempty"`
}

// Pool is one KV pool's state.
type Pool struct {
	Name     string     `json:"name"`
	Total    int        `json:"total_blocks"`
	Free     int        `json:"free_blocks"`
	Used     int        `json:"used_blocks"`
	Pinned   int        `json:"pinned_blocks"`
	PinnedBy []PinnedBy `json:"pinned_by,omitempty"`
}

// PinnedBy is how many blocks a request holds pinned.
type PinnedBy struct {
	Request int64 `json:"request"`
	Blocks  int   `json:"blocks"`
}

// RequestTimes is one request's events on one rank, each in nanoseconds
// since the run's start on the rank's clock.
type RequestTimes struct {
	Request int64   `json:"request"`
	Events  []Event `json:"events"`
}

// Event is one thing that happened to a request.
type Event struct {
	What string `json:"what"`
	AtNS int64  `json:"at_ns"`
}

// Iteration is one executor iteration: what it decided and why.
type Iteration struct {
	N        int64   `json:"n"`
	AtNS     int64   `json:"at_ns"`
	Decision string  `json:"decision"`
	Why      string  `json:"why,omitempty"`
	Guards   []Guard `json:"guards,omitempty"`
}

// MaxWorld bounds the world size a dump may claim.
const MaxWorld = 1 << 20

// FileName is the dump file of a world rank in a dump directory.
func FileName(worldRank int) string { return fmt.Sprintf("rank-%05d.json", worldRank) }

// Write writes d to dir as FileName(d.WorldRank), through a temporary file
// renamed into place, and returns its path.
func Write(dir string, d *Dump) (string, error) {
	if d.Format == "" {
		d.Format = Format
	}
	if d.Source == "" {
		d.Source = "rankrun"
	}
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return "", fmt.Errorf("diag: encoding the dump of rank %d: %w", d.WorldRank, err)
	}
	path := filepath.Join(dir, FileName(d.WorldRank))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("diag: writing the dump of rank %d: %w", d.WorldRank, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("diag: writing the dump of rank %d: %w", d.WorldRank, err)
	}
	return path, nil
}

// rankDumpName is the name rankrun gives a rank's dump (rank-NNNNN.json).
var rankDumpName = regexp.MustCompile(`^rank-\d+\.json$`)

// ReadFile reads one dump: a rankrun dump, or a PyTorch flight-recorder
// dump, pickled or JSON (see ReadPyTorch). A file larger than MaxDumpBytes
// is refused before it is read, and anything but a regular file (a named
// pipe, a socket, a device) before it is opened.
func ReadFile(path string) (*Dump, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	if len(b) > 0 && b[0] == pickleProto {
		d, err := ReadPyTorch(path, b)
		if err != nil {
			return nil, err
		}
		d.File = path
		return d, nil
	}
	var head struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("diag: %s: not a JSON dump: %v", path, err)
	}
	if head.Format == "" && rankDumpName.MatchString(filepath.Base(path)) {
		// Named as rankrun names its dumps, but with no format: not a
		// PyTorch dump either (those are nccl_trace_rank_N).
		return nil, fmt.Errorf("diag: %s: no \"format\" field: not a rankrun dump (they begin {\"format\": %q, ...})", path, Format)
	}
	if head.Format == "" {
		d, err := ReadPyTorch(path, b)
		if err != nil {
			return nil, err
		}
		d.File = path
		return d, nil
	}
	if !strings.HasPrefix(head.Format, "rankrun-dump/") {
		return nil, fmt.Errorf("diag: %s: format %q is not one this reads (rankrun-dump/1, or a PyTorch flight-recorder dump)", path, head.Format)
	}
	if head.Format != Format {
		return nil, fmt.Errorf("diag: %s: format %q is newer than this rankrun reads (%s)", path, head.Format, Format)
	}
	d := &Dump{}
	if err := json.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("diag: %s: %v", path, err)
	}
	switch {
	case d.WorldSize < 0 || d.WorldSize > MaxWorld:
		return nil, fmt.Errorf("diag: %s: world_size %d: must be in 0..%d", path, d.WorldSize, MaxWorld)
	case d.WorldRank < 0 || d.WorldSize > 0 && d.WorldRank >= d.WorldSize:
		return nil, fmt.Errorf("diag: %s: world_rank %d: must be in 0..world_size-1 (%d)", path, d.WorldRank, d.WorldSize-1)
	}
	d.File = path
	return d, nil
}

// readBounded reads a dump file, refusing one larger than MaxDumpBytes
// before reading it (in the pickle reader's words when it is a pickle),
// and anything but a regular file (a link is followed) before opening it:
// opening a named pipe, such as the nccl_trace_rank_N.pipe PyTorch makes
// with TORCH_NCCL_DEBUG_INFO_PIPE_FILE, waits for a writer forever.
func readBounded(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("diag: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(path, st.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("diag: %w", err)
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("diag: %w", err)
	}
	if !st.Mode().IsRegular() { // replaced between the two looks
		return nil, notRegular(path, st.Mode())
	}
	if st.Size() > MaxDumpBytes {
		var first [1]byte
		if _, err := io.ReadFull(f, first[:]); err == nil && first[0] == pickleProto {
			return nil, fmt.Errorf("diag: %s: pickle: at byte 0: the file is %d bytes: over the %d MiB limit on a dump", path, st.Size(), MaxDumpBytes>>20)
		}
		return nil, fmt.Errorf("diag: %s: the file is %d bytes: over the %d MiB limit on a dump", path, st.Size(), MaxDumpBytes>>20)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxDumpBytes+1))
	if err != nil {
		return nil, fmt.Errorf("diag: %w", err)
	}
	if len(b) > MaxDumpBytes { // it grew while read
		return nil, fmt.Errorf("diag: %s: the file is more than %d MiB: over the limit on a dump", path, MaxDumpBytes>>20)
	}
	return b, nil
}

// notRegular refuses a path that is not a regular file, naming what it is.
func notRegular(path string, m os.FileMode) error {
	what := "not a regular file"
	switch {
	case m&os.ModeNamedPipe != 0:
		what = "a named pipe (FIFO), not a regular file"
	case m&os.ModeSocket != 0:
		what = "a socket, not a regular file"
	case m&os.ModeDevice != 0:
		what = "a device, not a regular file"
	case m.IsDir():
		what = "a directory, not a regular file"
	}
	return fmt.Errorf("diag: %s: %s: a dump is a file", path, what)
}
