package diag

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A test-only writer of PyTorch flight-recorder dumps as PyTorch writes
// them: FlightRecorder::dump_dict's dict ("2.10"), pickled as torch's C++
// Pickler does (torch/csrc/jit/serialization/pickler.cpp, driven by
// pickle_str: protocol 2, aggregates untagged), and the same dump as
// dump_json writes it and as the pickle re-saved as JSON.

// The values the Pickler is given, as IValues.
type (
	// tDict is a c10::Dict: its keys in insertion order. shared: it is
	// held in more than one place (use_count > 1), as the stack frames are,
	// so the Pickler memoizes it by pointer: written once, then BINGET.
	tDict struct {
		keys   []string
		vals   []any
		shared bool
	}
	tList       []any // a c10::List<IValue> (AnyType)
	tTuple      []any
	tIntList    []int64 // a List[int]: build_intlist
	tDoubleList []float64
	tBoolList   []bool
)

func newDict(kv ...any) *tDict {
	d := &tDict{}
	for i := 0; i < len(kv); i += 2 {
		d.set(kv[i].(string), kv[i+1])
	}
	return d
}

func (d *tDict) set(k string, v any) *tDict {
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return d
}

// torchPickler is torch::jit::Pickler's opcode choice.
type torchPickler struct {
	b       []byte
	memo    uint32
	strs    map[string]uint32
	globals map[string]uint32
	ptrs    map[*tDict]uint32
	tag     bool // tag_aggregates: restore_type_tag around dicts and lists
}

// torchPickle is pickle_str(v): PROTO 2, the value, STOP.
func torchPickle(v any, tag bool) []byte {
	p := &torchPickler{strs: map[string]uint32{}, globals: map[string]uint32{}, ptrs: map[*tDict]uint32{}, tag: tag}
	p.b = append(p.b, 0x80, 2)
	p.push(v)
	return append(p.b, '.')
}

func (p *torchPickler) binput() uint32 {
	if p.memo <= 255 {
		p.b = append(p.b, 'q', byte(p.memo))
	} else {
		p.b = append(p.b, 'r')
		p.b = binary.LittleEndian.AppendUint32(p.b, p.memo)
	}
	p.memo++
	return p.memo - 1
}

func (p *torchPickler) binget(id uint32) {
	if id <= 255 {
		p.b = append(p.b, 'h', byte(id))
		return
	}
	p.b = append(p.b, 'j')
	p.b = binary.LittleEndian.AppendUint32(p.b, id)
}

// push is pushIValue: a shared dict is memoized by pointer.
func (p *torchPickler) push(v any) {
	if d, ok := v.(*tDict); ok && d.shared {
		if id, ok := p.ptrs[d]; ok {
			p.binget(id)
			return
		}
		p.pushImpl(v)
		p.ptrs[d] = p.binput()
		return
	}
	p.pushImpl(v)
}

func (p *torchPickler) pushImpl(v any) {
	switch x := v.(type) {
	case nil:
		p.b = append(p.b, 'N')
	case bool:
		if x {
			p.b = append(p.b, 0x88)
		} else {
			p.b = append(p.b, 0x89)
		}
	case int:
		p.pushInt(int64(x))
	case int64:
		p.pushInt(x)
	case float64:
		p.pushDouble(x)
	case string:
		p.pushString(x)
	case *tDict:
		p.startTypeTag()
		p.b = append(p.b, '}', '(')
		for i, k := range x.keys {
			p.pushString(k)
			p.push(x.vals[i])
		}
		p.b = append(p.b, 'u')
		p.endTypeTag("Dict[str, Any]")
	case tList:
		p.startTypeTag()
		p.b = append(p.b, ']', '(')
		for _, item := range x {
			p.push(item)
		}
		p.b = append(p.b, 'e')
		p.endTypeTag("List[Any]")
	case tTuple:
		switch len(x) {
		case 0:
			p.b = append(p.b, ')')
		case 1, 2, 3:
			for _, item := range x {
				p.push(item)
			}
			p.b = append(p.b, 0x85+byte(len(x)-1))
		default:
			p.b = append(p.b, '(')
			for _, item := range x {
				p.push(item)
			}
			p.b = append(p.b, 't')
		}
	case tIntList:
		p.specialized("build_intlist", func() {
			for _, n := range x {
				p.pushInt(n)
			}
		})
	case tDoubleList:
		p.specialized("build_doublelist", func() {
			for _, f := range x {
				p.pushDouble(f)
			}
		})
	case tBoolList:
		p.specialized("build_boollist", func() {
			for _, b := range x {
				p.pushImpl(b)
			}
		})
	default:
		panic(fmt.Sprintf("torchPickle: %T", v))
	}
}

func (p *torchPickler) pushInt(n int64) {
	switch {
	case n >= 0 && n <= math.MaxUint8:
		p.b = append(p.b, 'K', byte(n))
	case n >= 0 && n <= math.MaxUint16:
		p.b = append(p.b, 'M')
		p.b = binary.LittleEndian.AppendUint16(p.b, uint16(n))
	case n >= math.MinInt32 && n <= math.MaxInt32:
		p.b = append(p.b, 'J')
		p.b = binary.LittleEndian.AppendUint32(p.b, uint32(int32(n)))
	default:
		p.b = append(p.b, 0x8a, 8)
		p.b = binary.LittleEndian.AppendUint64(p.b, uint64(n))
	}
}

func (p *torchPickler) pushDouble(f float64) {
	p.b = append(p.b, 'G')
	p.b = binary.BigEndian.AppendUint64(p.b, math.Float64bits(f))
}

// pushString memoizes strings by value: BINUNICODE and a BINPUT, then
// BINGET for a repeat.
func (p *torchPickler) pushString(s string) {
	if id, ok := p.strs[s]; ok {
		p.binget(id)
		return
	}
	p.b = append(p.b, 'X')
	p.b = binary.LittleEndian.AppendUint32(p.b, uint32(len(s)))
	p.b = append(p.b, s...)
	p.strs[s] = p.binput()
}

func (p *torchPickler) pushGlobal(module, name string) {
	key := module + "\n" + name + "\n"
	if id, ok := p.globals[key]; ok {
		p.binget(id)
		return
	}
	p.b = append(p.b, 'c')
	p.b = append(p.b, key...)
	p.globals[key] = p.binput()
}

func (p *torchPickler) specialized(name string, items func()) {
	p.pushGlobal("torch.jit._pickle", name)
	p.b = append(p.b, '(', ']', '(')
	items()
	p.b = append(p.b, 'e', 't', 'R')
}

func (p *torchPickler) startTypeTag() {
	if p.tag {
		p.pushGlobal("torch.jit._pickle", "restore_type_tag")
	}
}

func (p *torchPickler) endTypeTag(annotation string) {
	if p.tag {
		p.pushString(annotation)
		p.b = append(p.b, 0x86, 'R')
	}
}

// plainOf is what Python's pickle.load makes of v (tuples as lists), for
// re-saving it as JSON.
func plainOf(v any) any {
	switch x := v.(type) {
	case *tDict:
		m := map[string]any{}
		for i, k := range x.keys {
			m[k] = plainOf(x.vals[i])
		}
		return m
	case tList:
		return plainList(x)
	case tTuple:
		return plainList(x)
	}
	return v
}

func plainList(l []any) []any {
	out := make([]any, len(l))
	for i, v := range l {
		out[i] = plainOf(v)
	}
	return out
}

// A flight-recorder job: each rank's recorder.
type (
	frFrame struct {
		name, file string
		line       int64
	}
	frGroup struct {
		name, desc string
		ranks      []int
	}
	frEntry struct {
		group   frGroup
		seq     int64 // collective_seq_id (p2p_seq_id for a p2p op)
		op      string
		p2p     bool
		in, out [][]int64
		dtype   string
		state   string // scheduled, started, completed
		created int64
		frames  []*tDict
	}
	frRank struct {
		rank    int
		version string
		groups  []frGroup
		entries []frEntry
	}
)

const frTorch = "/usr/lib/python3.12/site-packages/torch/distributed/"

var frFrames = map[string]*tDict{}

// frameDict is one frame as getCollectiveTrace makes it: every entry's
// frames list holds the same dicts (all_frames), so they are shared.
func frameDict(f frFrame) *tDict {
	key := fmt.Sprintf("%s|%s|%d", f.name, f.file, f.line)
	if d, ok := frFrames[key]; ok {
		return d
	}
	d := newDict("name", f.name, "filename", f.file, "line", f.line)
	d.shared = true
	frFrames[key] = d
	return d
}

// frStack is a collective's stack, innermost first: the collective in
// distributed_c10d.py, c10d_logger's wrapper, then the job's frames.
func frStack(op string, job ...frFrame) []*tDict {
	fs := []*tDict{
		frameDict(frFrame{op, frTorch + "distributed_c10d.py", map[string]int64{"all_reduce": 2806, "all_gather": 3658, "broadcast": 2422, "send": 2010, "recv": 2062}[op]}),
		frameDict(frFrame{"wrapper", frTorch + "c10d_logger.py", 81}),
	}
	for _, f := range job {
		fs = append(fs, frameDict(f))
	}
	return fs
}

// ranksStr is ranks as ranks_str writes them: "[0, 1, 2, 3]".
func ranksStr(ranks []int) string {
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = strconv.Itoa(r)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (e frEntry) profilingName() string {
	return "nccl:" + e.op
}

// dumpDict is FlightRecorder::dump_dict for one rank.
func (r frRank) dumpDict() *tDict {
	cfg := newDict()
	status := newDict()
	for i, g := range r.groups {
		cfg.set(g.name, newDict("name", g.name, "desc", g.desc, "ranks", ranksStr(g.ranks)))
		var last int64
		for _, e := range r.entries {
			if e.group.name == g.name && !e.p2p {
				last = max(last, e.seq)
			}
		}
		status.set(fmt.Sprint(i), newDict("last_enqueued_collective", last, "last_started_collective", last, "last_completed_collective", last-1))
	}
	entries := tList{}
	for i, e := range r.entries {
		d := newDict()
		frames := tList{}
		for _, f := range e.frames {
			frames = append(frames, f)
		}
		d.set("frames", frames)
		d.set("record_id", int64(i))
		d.set("pg_id", int64(0))
		d.set("process_group", tTuple{e.group.name, e.group.desc})
		d.set("thread_name", "pt_main_thread")
		d.set("thread_id", fmt.Sprint(139871544207168+r.rank))
		coll, p2p := e.seq, int64(0)
		if e.p2p {
			coll, p2p = 0, e.seq
		}
		d.set("collective_seq_id", coll)
		d.set("p2p_seq_id", p2p)
		d.set("op_id", int64(i+1))
		d.set("profiling_name", e.profilingName())
		d.set("time_created_ns", e.created)
		if e.state == "completed" {
			d.set("duration_ms", 0.412)
		}
		d.set("input_sizes", sizesList(e.in))
		d.set("input_dtypes", dtypesList(e.dtype, len(e.in)))
		d.set("output_sizes", sizesList(e.out))
		d.set("output_dtypes", dtypesList(e.dtype, len(e.out)))
		d.set("state", e.state)
		var started, completed any
		if e.state != "scheduled" {
			started = e.created + 52_000
		}
		if e.state == "completed" {
			completed = e.created + 907_000
		}
		d.set("time_discovered_started_ns", started)
		d.set("time_discovered_completed_ns", completed)
		d.set("retired", e.state == "completed")
		d.set("timeout_ms", int64(600000))
		d.set("is_p2p", e.p2p)
		entries = append(entries, d)
	}
	top := newDict("version", r.version, "pg_config", cfg, "comm_lib_version", "2.21.5", "pg_status", status, "entries", entries)
	top.set("nccl_comm_state", newDict("0x7f3a2c", newDict("commId", "0x7f3a2c", "rank", fmt.Sprint(r.rank))))
	return top
}

func sizesList(sizes [][]int64) tList {
	l := tList{}
	for _, s := range sizes {
		dims := tList{}
		for _, n := range s {
			dims = append(dims, n)
		}
		l = append(l, dims)
	}
	return l
}

func dtypesList(dtype string, n int) tList {
	l := tList{}
	for range n {
		l = append(l, dtype)
	}
	return l
}

// dumpJSON is FlightRecorder::dump_json for one rank: no stack frames,
// 0 for a time not seen, pg_status's values as strings.
func (r frRank) dumpJSON() map[string]any {
	top := plainOf(r.dumpDict()).(map[string]any)
	for _, st := range top["pg_status"].(map[string]any) {
		m := st.(map[string]any)
		for k, v := range m {
			m[k] = fmt.Sprint(v)
		}
	}
	entries := top["entries"].([]any)
	for _, e := range entries {
		m := e.(map[string]any)
		delete(m, "frames")
		for _, k := range []string{"time_discovered_started_ns", "time_discovered_completed_ns"} {
			if m[k] == nil {
				m[k] = int64(0)
			}
		}
	}
	if len(entries) == 0 {
		delete(top, "entries")
	}
	delete(top, "nccl_comm_state")
	return top
}

// writeJob writes the job's dumps as nccl_trace_rank_N into three
// directories: pickled (as PyTorch writes them), the pickle re-saved as
// JSON, and dump_json's JSON.
func writeJob(t testing.TB, ranks []frRank) (pickled, resaved, dumpJSON string) {
	t.Helper()
	root := t.TempDir()
	pickled, resaved, dumpJSON = filepath.Join(root, "pickle"), filepath.Join(root, "resaved"), filepath.Join(root, "json")
	for _, dir := range []string{pickled, resaved, dumpJSON} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range ranks {
		name := fmt.Sprintf("nccl_trace_rank_%d", r.rank)
		d := r.dumpDict()
		rs, err := json.Marshal(plainOf(d))
		if err != nil {
			t.Fatal(err)
		}
		js, err := json.Marshal(r.dumpJSON())
		if err != nil {
			t.Fatal(err)
		}
		for dir, b := range map[string][]byte{pickled: torchPickle(d, false), resaved: rs, dumpJSON: js} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return pickled, resaved, dumpJSON
}

// frJobSpec is a job of world ranks, each with its groups and entries
// (and version, "2.10" unless version says); the ranks in skip write no
// dump.
type frJobSpec struct {
	world   int
	groups  func(rank int) []frGroup
	entries func(rank int) []frEntry
	skip    map[int]bool
	version func(rank int) string
}

func (s frJobSpec) ranks() []frRank {
	var out []frRank
	for r := range s.world {
		if s.skip[r] {
			continue
		}
		v := "2.10"
		if s.version != nil {
			v = s.version(r)
		}
		out = append(out, frRank{rank: r, version: v, groups: s.groups(r), entries: s.entries(r)})
	}
	return out
}

func worldGroup(n int) frGroup {
	ranks := make([]int, n)
	for i := range ranks {
		ranks[i] = i
	}
	return frGroup{name: "0", desc: "default_pg", ranks: ranks}
}

var (
	jobTrain   = frFrame{"train_step", "/workspace/job/train.py", 126}
	jobGather  = frFrame{"train_step", "/workspace/job/train.py", 131}
	jobForward = frFrame{"forward", "/workspace/job/model/layers.py", 88}
	jobMain    = frFrame{"<module>", "/workspace/job/train.py", 240}
)

// allReduces are seqs 1..n of all_reduce on g, each of [2048, 1024]
// BFloat16, completed; then the last one's state is last.
func allReduces(g frGroup, rank int, n int64, last string) []frEntry {
	var out []frEntry
	for seq := int64(1); seq <= n; seq++ {
		state := "completed"
		if seq == n {
			state = last
		}
		sz := [][]int64{{2048, 1024}}
		out = append(out, frEntry{group: g, seq: seq, op: "all_reduce", in: sz, out: sz, dtype: "BFloat16", state: state,
			created: 1731402113000000000 + seq*250_000_000 + int64(rank)*91_000, frames: frStack("all_reduce", jobTrain, jobMain)})
	}
	return out
}
