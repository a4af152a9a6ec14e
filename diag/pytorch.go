package diag

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ReadPyTorch reads a PyTorch NCCL flight-recorder dump from b in any of
// its forms: the pickle FlightRecorder::dump writes (b begins with the
// pickle PROTO opcode 0x80; ReadPickle decodes it, and its JSON form is
// read as below), what FlightRecorder::dump_json writes, or the pickled
// dump re-saved as JSON. path names the file in errors and gives the rank.
//
// The dump is an object with "version" (the Dump's Version: "2.10" in
// 2026), "pg_config" (process-group name to {name, desc, ranks}, ranks a
// list or a string such as "[0, 1, 2, 3]"), "pg_status" and "entries",
// the ring buffer oldest first, each entry with
// record_id, process_group [name, desc], collective_seq_id, p2p_seq_id,
// profiling_name ("nccl:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0"),
// the time_*_ns fields, state ("scheduled", "started", "completed"),
// input/output sizes and dtypes, is_p2p and, in pickled dumps, frames.
//
// The dump does not say which rank wrote it: PyTorch names the file
// <prefix><rank> (nccl_trace_rank_3 by default), so the world rank is the
// trailing digits of the file's base name (a ".json" suffix is ignored).
// The world size is the size of the group described as "default_pg" when
// pg_config lists one, 0 otherwise.
//
// Each entry becomes one Op: Group is the process-group name, Kind the
// profiling name without its backend prefix and peer ("all_reduce",
// "send"), Seq the collective sequence number (0 for point-to-point, whose
// Peer is the other group rank when the profiling name says it), Shape the
// input and output sizes and dtypes, Site the call site (site), StartNS the
// time the recorder saw the op start (its creation time if it had not
// seen it start) and EndNS the time it saw it complete (0 unless state is
// "completed").
//
// Malformed input returns one error line naming the file and the field.
func ReadPyTorch(path string, b []byte) (*Dump, error) {
	r := ptReader{path: path}
	if len(b) > 0 && b[0] == pickleProto {
		v, err := ReadPickle(path, b)
		if err != nil {
			return nil, err
		}
		if _, ok := v.(map[string]any); !ok {
			return nil, r.errf("top level", "the pickle holds %s, not the dump's dict", plainKind(v))
		}
		b = pickleJSON(v)
	}
	d, err := r.read(b)
	if err != nil {
		return nil, err
	}
	return d, nil
}

type ptReader struct{ path string }

func (r *ptReader) errf(field, format string, args ...any) error {
	return fmt.Errorf("diag: %s: PyTorch flight-recorder dump: %s: %s", r.path, field, fmt.Sprintf(format, args...))
}

type ptObject map[string]json.RawMessage

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// object decodes raw as a JSON object.
func (r *ptReader) object(raw json.RawMessage, field string) (ptObject, error) {
	var o ptObject
	if isNull(raw) || json.Unmarshal(raw, &o) != nil {
		return nil, r.errf(field, "must be an object")
	}
	return o, nil
}

// list decodes raw as a JSON array.
func (r *ptReader) list(raw json.RawMessage, field string) ([]json.RawMessage, error) {
	var l []json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &l) != nil {
		return nil, r.errf(field, "must be a list")
	}
	return l, nil
}

// str reads o[key] as a string; absent or null is ok unless required.
func (r *ptReader) str(o ptObject, key, field string, required bool) (string, bool, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		if required {
			return "", false, r.errf(field, "missing (a string)")
		}
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false, r.errf(field, "must be a string")
	}
	return s, true, nil
}

// integer reads o[key] as a non-negative integer; absent or null is ok
// unless required.
func (r *ptReader) integer(o ptObject, key, field string, required bool) (int64, bool, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		if required {
			return 0, false, r.errf(field, "missing (a non-negative integer)")
		}
		return 0, false, nil
	}
	var n int64
	if json.Unmarshal(raw, &n) != nil || n < 0 {
		return 0, false, r.errf(field, "must be a non-negative integer")
	}
	return n, true, nil
}

// boolean reads o[key] as a bool; absent or null reads false.
func (r *ptReader) boolean(o ptObject, key, field string) (bool, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return false, nil
	}
	var v bool
	if json.Unmarshal(raw, &v) != nil {
		return false, r.errf(field, "must be true or false")
	}
	return v, nil
}

func (r *ptReader) read(b []byte) (*Dump, error) {
	var top ptObject
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, r.errf("top level", "not JSON, or not a JSON object: %v", err)
	}
	if top == nil {
		return nil, r.errf("top level", "must be an object")
	}
	version, _, err := r.str(top, "version", "version", false)
	if err != nil {
		return nil, err
	}

	rank, err := r.rankFromName()
	if err != nil {
		return nil, err
	}
	d := &Dump{Source: "pytorch", Backend: "pytorch", Version: version, WorldRank: rank, Groups: []Group{}, Ops: []Op{}}

	rawCfg, ok := top["pg_config"]
	if !ok {
		return nil, r.errf("pg_config", "missing (an object of process groups by name)")
	}
	var defaultRanks []int
	d.Groups, defaultRanks, err = r.groups(rawCfg)
	if err != nil {
		return nil, err
	}
	if defaultRanks != nil {
		d.WorldSize = len(defaultRanks)
		in := false
		for _, m := range defaultRanks {
			in = in || m == rank
		}
		if !in {
			return nil, r.errf("file name", "gives rank %d, which is not among the %d ranks of the default_pg group in pg_config", rank, len(defaultRanks))
		}
	}

	// dump_json leaves entries out when the rank recorded nothing: a
	// rank that hung before its first collective still has a dump.
	rawEntries, ok := top["entries"]
	if !ok {
		return d, nil
	}
	entries, err := r.list(rawEntries, "entries")
	if err != nil {
		return nil, err
	}
	type rec struct {
		id int64
		op Op
	}
	recs := make([]rec, 0, len(entries))
	seen := make(map[int64]int, len(entries))
	for i, raw := range entries {
		id, op, err := r.entry(raw, fmt.Sprintf("entries[%d]", i))
		if err != nil {
			return nil, err
		}
		if j, dup := seen[id]; dup {
			return nil, r.errf(fmt.Sprintf("entries[%d].record_id", i), "%d is also entries[%d]'s; record ids are unique", id, j)
		}
		seen[id] = i
		recs = append(recs, rec{id, op})
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].id < recs[j].id })
	for _, x := range recs {
		d.Ops = append(d.Ops, x.op)
	}
	return d, nil
}

// rankFromName takes the world rank from the trailing digits of the file's
// base name, as PyTorch writes <prefix><rank>.
func (r *ptReader) rankFromName() (int, error) {
	base := filepath.Base(r.path)
	if len(base) > 5 && strings.EqualFold(base[len(base)-5:], ".json") {
		base = base[:len(base)-5]
	}
	i := len(base)
	for i > 0 && base[i-1] >= '0' && base[i-1] <= '9' {
		i--
	}
	if i == len(base) {
		return 0, r.errf("file name", "%q does not end in the rank's digits, and the dump has no rank field (PyTorch names each rank's dump <prefix><rank>, e.g. nccl_trace_rank_3)", filepath.Base(r.path))
	}
	n, err := strconv.Atoi(base[i:])
	if err != nil || n < 0 {
		return 0, r.errf("file name", "rank digits %q are not a rank", base[i:])
	}
	return n, nil
}

// groups reads pg_config; it returns the groups sorted by name (numeric
// names in numeric order first) and the ranks of the default_pg group, nil
// if none is described so.
func (r *ptReader) groups(raw json.RawMessage) ([]Group, []int, error) {
	cfg, err := r.object(raw, "pg_config")
	if err != nil {
		return nil, nil, err
	}
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var defaultRanks []int
	groups := make([]Group, 0, len(cfg))
	for _, k := range keys {
		field := fmt.Sprintf("pg_config[%q]", k)
		pg, err := r.object(cfg[k], field)
		if err != nil {
			return nil, nil, err
		}
		name, ok, err := r.str(pg, "name", field+".name", false)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			name = k
		}
		desc, _, err := r.str(pg, "desc", field+".desc", false)
		if err != nil {
			return nil, nil, err
		}
		ranks, err := r.ranks(pg["ranks"], field+".ranks")
		if err != nil {
			return nil, nil, err
		}
		if desc == "default_pg" && defaultRanks == nil {
			defaultRanks = ranks
		}
		groups = append(groups, Group{Name: name, Ranks: ranks})
	}
	sort.SliceStable(groups, func(i, j int) bool { return groupLess(groups[i].Name, groups[j].Name) })
	return groups, defaultRanks, nil
}

func groupLess(a, b string) bool {
	na, ea := strconv.ParseUint(a, 10, 64)
	nb, eb := strconv.ParseUint(b, 10, 64)
	switch {
	case ea == nil && eb == nil:
		return na < nb
	case ea == nil:
		return true
	case eb == nil:
		return false
	}
	return a < b
}

// ranks reads a group's members: a JSON list of world ranks, or the string
// PyTorch writes for one ("[0, 1, 2, 3]"). They come back in ascending
// order, which is group-rank order in PyTorch (new_group sorts its ranks,
// and the flight-recorder analyzer maps group ranks through the sorted list).
func (r *ptReader) ranks(raw json.RawMessage, field string) ([]int, error) {
	const rule = "must be a list of distinct non-negative world ranks, or a string holding one such as \"[0, 1, 2, 3]\""
	if isNull(raw) {
		return nil, r.errf(field, "missing (%s)", rule[len("must be "):])
	}
	var ranks []int
	if json.Unmarshal(raw, &ranks) != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil || json.Unmarshal([]byte(s), &ranks) != nil || ranks == nil {
			return nil, r.errf(field, rule)
		}
	}
	if ranks == nil {
		return nil, r.errf(field, rule)
	}
	sort.Ints(ranks)
	for i, m := range ranks {
		if m < 0 || (i > 0 && ranks[i-1] == m) {
			return nil, r.errf(field, rule)
		}
	}
	return ranks, nil
}

var ptStates = map[string]bool{"scheduled": true, "started": true, "completed": true}

// entry reads one flight-recorder entry; it returns its record id and Op.
func (r *ptReader) entry(raw json.RawMessage, field string) (int64, Op, error) {
	op := Op{Peer: -1}
	e, err := r.object(raw, field)
	if err != nil {
		return 0, op, err
	}
	id, _, err := r.integer(e, "record_id", field+".record_id", true)
	if err != nil {
		return 0, op, err
	}

	pgRaw, ok := e["process_group"]
	if !ok || isNull(pgRaw) {
		return 0, op, r.errf(field+".process_group", "missing (a [name, desc] list)")
	}
	var pg []string
	if json.Unmarshal(pgRaw, &pg) != nil || len(pg) == 0 || pg[0] == "" {
		return 0, op, r.errf(field+".process_group", "must be a [name, desc] list of strings")
	}
	op.Group = pg[0]

	name, _, err := r.str(e, "profiling_name", field+".profiling_name", true)
	if err != nil {
		return 0, op, err
	}
	kind, meta := name, ""
	if i := strings.IndexByte(kind, ':'); i > 0 && !strings.ContainsAny(kind[:i], " \t") {
		kind = kind[i+1:]
	}
	kind = strings.TrimSpace(kind)
	if i := strings.IndexAny(kind, " \t"); i >= 0 {
		kind, meta = kind[:i], strings.TrimSpace(kind[i+1:])
	}
	if kind == "" {
		return 0, op, r.errf(field+".profiling_name", "%q names no operation (want e.g. \"nccl:all_reduce\")", name)
	}
	op.Kind = kind

	seq, _, err := r.integer(e, "collective_seq_id", field+".collective_seq_id", true)
	if err != nil {
		return 0, op, err
	}
	if _, _, err := r.integer(e, "p2p_seq_id", field+".p2p_seq_id", false); err != nil {
		return 0, op, err
	}
	isP2P, err := r.boolean(e, "is_p2p", field+".is_p2p")
	if err != nil {
		return 0, op, err
	}
	if isP2P || kind == "send" || kind == "recv" {
		op.Peer = ptPeer(kind, meta)
	} else {
		op.Seq = uint64(seq)
	}

	state, _, err := r.str(e, "state", field+".state", true)
	if err != nil {
		return 0, op, err
	}
	if !ptStates[state] {
		return 0, op, r.errf(field+".state", "%q is not scheduled, started or completed", state)
	}

	created, _, err := r.integer(e, "time_created_ns", field+".time_created_ns", false)
	if err != nil {
		return 0, op, err
	}
	started, _, err := r.integer(e, "time_discovered_started_ns", field+".time_discovered_started_ns", false)
	if err != nil {
		return 0, op, err
	}
	completed, _, err := r.integer(e, "time_discovered_completed_ns", field+".time_discovered_completed_ns", false)
	if err != nil {
		return 0, op, err
	}
	// dump_json writes 0 for a time not seen, the pickled dump None.
	op.StartNS = created
	if started > 0 {
		op.StartNS = started
	}
	if state == "completed" {
		op.EndNS = completed
		if op.EndNS == 0 {
			// Completed with no time recorded: it ended, when is unknown.
			op.EndNS = max(op.StartNS, 1)
		}
	}

	op.Shape, err = r.shape(e, field)
	if err != nil {
		return 0, op, err
	}
	op.Site, err = r.site(e, field)
	if err != nil {
		return 0, op, err
	}
	return id, op, nil
}

// ptPeer reads the peer group rank from a point-to-point profiling name's
// tail: "0->1" for a send (src->dst) and "1<-0" for a recv (dst<-src); the
// peer is the second number either way. -1 if the name does not say.
func ptPeer(kind, meta string) int {
	sep := ""
	switch kind {
	case "send":
		sep = "->"
	case "recv":
		sep = "<-"
	default:
		return -1
	}
	_, peer, ok := strings.Cut(meta, sep)
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(peer))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// shape writes an entry's tensors canonically, "in [1024] Float; out [4,
// 1024] Float", tensors of one side separated by ", ": the same string on
// every rank of a matched collective. "" when the entry records neither.
func (r *ptReader) shape(e ptObject, field string) (string, error) {
	var sides []string
	recorded := false
	for _, side := range []string{"input", "output"} {
		sizesKey, dtypesKey := side+"_sizes", side+"_dtypes"
		var sizes [][]int64
		if raw, ok := e[sizesKey]; ok && !isNull(raw) {
			if json.Unmarshal(raw, &sizes) != nil {
				return "", r.errf(field+"."+sizesKey, "must be a list of size lists of integers, e.g. [[3, 4]]")
			}
			recorded = true
		}
		var dtypes []string
		if raw, ok := e[dtypesKey]; ok && !isNull(raw) {
			if json.Unmarshal(raw, &dtypes) != nil {
				return "", r.errf(field+"."+dtypesKey, "must be a list of dtype names, e.g. [\"Float\"]")
			}
			recorded = true
		}
		if len(dtypes) != len(sizes) {
			return "", r.errf(field+"."+dtypesKey, "has %d dtypes for %d tensors in %s; each tensor has one", len(dtypes), len(sizes), sizesKey)
		}
		label := side[:len(side)-3] // "in", "out"
		if len(sizes) == 0 {
			sides = append(sides, label+" -")
			continue
		}
		ts := make([]string, len(sizes))
		for i, s := range sizes {
			dims := make([]string, len(s))
			for j, n := range s {
				dims[j] = strconv.FormatInt(n, 10)
			}
			ts[i] = "[" + strings.Join(dims, ", ") + "] " + dtypes[i]
		}
		sides = append(sides, label+" "+strings.Join(ts, ", "))
	}
	if !recorded {
		return "", nil
	}
	return strings.Join(sides, "; "), nil
}

// site writes an entry's call site as "dir/file.py:line (function)", the
// file's last two path elements. It is the innermost frame of a Python
// file (.py) that is not torch's own (torchPy): with
// TORCH_NCCL_TRACE_CPP_STACK the innermost frames are C++ (aten/, c10/,
// "??", libc, CPython's ceval.c), and the user's line is further out.
// With no such frame, it is the innermost frame with a file name that is
// not under a torch/ directory (torchFrame), of whatever language; "" when
// none is left (the JSON dump leaves stack traces out). Frames past the
// answer are not read.
func (r *ptReader) site(e ptObject, field string) (string, error) {
	raw, ok := e["frames"]
	if !ok || isNull(raw) {
		return "", nil
	}
	frames, err := r.list(raw, field+".frames")
	if err != nil {
		return "", err
	}
	fallback, haveFallback := "", false
	for i, fr := range frames {
		ff := fmt.Sprintf("%s.frames[%d]", field, i)
		f, err := r.object(fr, ff)
		if err != nil {
			return "", err
		}
		file, _, err := r.str(f, "filename", ff+".filename", false)
		if err != nil {
			return "", err
		}
		py := strings.HasSuffix(file, ".py") && !torchPy(file)
		if !py && (haveFallback || torchFrame(file)) {
			continue
		}
		name, _, err := r.str(f, "name", ff+".name", false)
		if err != nil {
			return "", err
		}
		line, hasLine, err := r.integer(f, "line", ff+".line", false)
		if err != nil {
			return "", err
		}
		parts := pathParts(file)
		if len(parts) > 2 {
			parts = parts[len(parts)-2:]
		}
		s := strings.Join(parts, "/")
		if hasLine {
			s += ":" + strconv.FormatInt(line, 10)
		}
		if name != "" {
			s += " (" + name + ")"
		}
		if py {
			return s, nil
		}
		fallback, haveFallback = s, true
	}
	return fallback, nil
}

func pathParts(file string) []string {
	return strings.FieldsFunc(file, func(c rune) bool { return c == '/' || c == '\\' })
}

// torchPy reports whether a Python file is torch's own: distributed_c10d.py,
// a file of the installed torch package (under site-packages/torch/ or
// dist-packages/torch/), of torch's distributed package wherever it lies
// (torch/distributed/, as in a source checkout), or a path relative to
// torch's own root (torch/...). A user's directory that happens to be
// named torch (/home/u/torch/train.py) is not.
func torchPy(file string) bool {
	parts := pathParts(file)
	if len(parts) == 0 {
		return true
	}
	if parts[len(parts)-1] == "distributed_c10d.py" {
		return true
	}
	dirs := parts[:len(parts)-1]
	if len(dirs) > 0 && dirs[0] == "torch" && !strings.HasPrefix(file, "/") && !strings.HasPrefix(file, `\`) {
		return true
	}
	for i := 0; i+1 < len(dirs); i++ {
		switch {
		case (dirs[i] == "site-packages" || dirs[i] == "dist-packages") && dirs[i+1] == "torch":
			return true
		case dirs[i] == "torch" && dirs[i+1] == "distributed":
			return true
		}
	}
	return false
}

// torchFrame reports whether a frame's file is torch's own (or names no
// file), for a frame of any language: distributed_c10d.py, or any file
// under a torch/ directory.
func torchFrame(file string) bool {
	parts := pathParts(file)
	if len(parts) == 0 {
		return true
	}
	if parts[len(parts)-1] == "distributed_c10d.py" {
		return true
	}
	for _, p := range parts[:len(parts)-1] {
		if p == "torch" {
			return true
		}
	}
	return false
}
