package diag

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// u32 and u64 are little-endian headers, as pickle writes lengths.
func u32(n uint32) string { return string(binary.LittleEndian.AppendUint32(nil, n)) }
func u64(n uint64) string { return string(binary.LittleEndian.AppendUint64(nil, n)) }

// binunicode is a BINUNICODE string.
func binunicode(s string) string { return "X" + u32(uint32(len(s))) + s }

// jsonOf is a value as plain JSON, map keys sorted.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// What torch's Pickler writes decodes to the dict it was given: a whole
// flight-recorder dump (shared frames, memoized strings, LONG1 times,
// tuples, None), a Pickler that tags aggregates (restore_type_tag) and
// writes typed lists (build_intlist, build_doublelist, build_boollist),
// and one that memoizes past 255 (LONG_BINPUT, LONG_BINGET).
func TestReadPickleTorchPickler(t *testing.T) {
	keys := newDict()
	var all tList
	for i := range 300 {
		k := fmt.Sprintf("key%03d", i)
		keys.set(k, int64(i)*1_000_003)
		all = append(all, k)
	}
	keys.set("again", all) // every key again: LONG_BINGET past 255
	typed := newDict("sizes", tIntList{1, 255, 256, 65535, 65536, -1, 1 << 40, -1 << 40},
		"durations", tDoubleList{0.5, -2.25}, "flags", tBoolList{true, false},
		"nested", tList{newDict("t0", tTuple{}, "t1", tTuple{"a"}, "t3", tTuple{1, 2, 3}, "t5", tTuple{1, 2, 3, 4, 5})})
	for _, c := range []struct {
		name string
		v    *tDict
		tag  bool
	}{
		{"dump", jobOps.ranks()[3].dumpDict(), false},
		{"memo past 255", keys, false},
		{"typed lists", typed, false},
		{"tagged", typed, true},
		{"tagged dump", jobStuck.ranks()[2].dumpDict(), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := torchPickle(c.v, c.tag)
			got, err := ReadPickle("p", b)
			if err != nil {
				t.Fatal(err)
			}
			want := plainOf(c.v)
			if c.name == "typed lists" || c.name == "tagged" {
				want = map[string]any{"sizes": []int64{1, 255, 256, 65535, 65536, -1, 1 << 40, -1 << 40}, "durations": []float64{0.5, -2.25},
					"flags": []bool{true, false}, "nested": plainOf(c.v.vals[3])}
			}
			if g, w := jsonOf(t, got), jsonOf(t, want); g != w {
				t.Errorf("decoded\n%s\nwant\n%s", g, w)
			}
			if g := string(pickleJSON(got)); g != jsonOf(t, got) {
				t.Errorf("pickleJSON\n%s\nencoding/json\n%s", g, jsonOf(t, got))
			}
		})
	}
}

// Python's own opcodes (protocols 2 to 5), each decoded.
func TestReadPickleOpcodes(t *testing.T) {
	for _, c := range []struct {
		name, pickle, want string
	}{
		{"ints", "\x80\x02(K\x07M\x10\x27J\xff\xff\xff\xff\x8a\x00\x8a\x01\xff\x8a\x02\x00\x80\x8a\x08" + u64(1<<63-1) + "\x8b" + u32(3) + "\x00\x00\x80l.",
			"[7,10000,-1,0,-1,-32768,9223372036854775807,-8388608]"},
		{"floats", "\x80\x02(G\x3f\xf8\x00\x00\x00\x00\x00\x00G\x7f\xf8\x00\x00\x00\x00\x00\x01G\x7f\xf0\x00\x00\x00\x00\x00\x00l.", "[1.5,null,null]"},
		{"strings and bytes", "\x80\x05\x95" + u64(40) + "(U\x01aT" + u32(2) + "bcC\x01dB" + u32(1) + "e\x8c\x02f\"\x8d" + u64(1) + "g\x8e" + u64(1) + "h\x96" + u64(2) + "\x00\nl.",
			`["a","bc","d","e","f\"","g","h","\u0000\u000a"]`},
		{"dict by DICT, int keys", "\x80\x02(K\x01X\x01\x00\x00\x00aJ\xfe\xff\xff\xff\x88\x89\x86d.", `{"-2":[true,false],"1":"a"}`},
		{"SETITEM, APPEND, tuples", "\x80\x02}q\x00X\x01\x00\x00\x00k]q\x01K\x01a)aK\x02\x85a(K\x03K\x04K\x05K\x06ta\x89as.", `{"k":[1,[],[2],[3,4,5,6],false]}`},
		{"DUP, POP, POP_MARK, MEMOIZE, BINGET", "\x80\x04]\x94K\x01K\x022\x300(K\x09K\x091a\x94h\x00h\x01\x86.", "[[1],[1]]"},
		{"STACK_GLOBAL of an allowed builder", "\x80\x04\x8c\x11torch.jit._pickle\x8c\rbuild_intlist\x93](K\x01K\x02e\x85R.", "[1,2]"},
		{"restore_type_tag", "\x80\x02ctorch.jit._pickle\nrestore_type_tag\nq\x00}X\x08\x00\x00\x00Dict[..]\x86R.", "{}"},
		{"bytes after STOP are ignored", "\x80\x02N.junk", "null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := ReadPickle("p", []byte(c.pickle))
			if err != nil {
				t.Fatal(err)
			}
			if got := string(pickleJSON(v)); got != c.want {
				t.Errorf("decoded %s, want %s", got, c.want)
			}
		})
	}
}

// chain is a pickle of lists nested n deep with no MARK: each made, put in
// the memo, and appended into the one before, got back from the memo.
func chain(n int) string {
	s := []byte("\x80\x02]q\x00")
	for i := 1; i <= n; i++ {
		s = append(s, 'h', byte(i-1), ']', 'q', byte(i), 'a', '0')
	}
	return string(s) + "."
}

// laughs is a pickle of n lists, each holding the one before twice: tiny,
// but written out it comes to 2^n of the innermost.
func laughs(n int) string {
	s := []byte("\x80\x02" + binunicode(strings.Repeat("ha", 50)) + "q\x00")
	for i := 1; i <= n; i++ {
		s = append(s, '(', 'h', byte(i-1), 'h', byte(i-1), 'l', 'q', byte(i), '0')
	}
	return string(append(s, 'h', byte(n), '.'))
}

// Untrusted input: each refusal is one line, "diag: FILE: pickle: at byte
// N: RULE", from a small file built here.
func TestReadPickleRefuses(t *testing.T) {
	dir := t.TempDir()
	deep := "\x80\x02" + strings.Repeat("(", 101) + "N."
	cases := []struct {
		name, pickle, want string
	}{
		// The five the brief names.
		{"string header claims 1 GiB", "\x80\x02X" + u32(1<<30) + "abc.", "at byte 2: BINUNICODE of 1073741824 bytes: over the 64 MiB limit on one string"},
		{"MARKs nested deeper than 100", deep, "at byte 102: MARK nested deeper than 100"},
		{"values nested deeper than 100", chain(150), fmt.Sprintf("at byte %d: values nested deeper than 100", 7*100)},
		{"a list appended into itself", "\x80\x02]q\x00h\x00a.", "at byte 2: a list made here holds itself (a cyclic pickle): a flight-recorder dump is a tree"},
		{"truncated: no STOP", "\x80\x02}q\x00(" + binunicode("version") + binunicode("2.10") + "u", "at byte 28: truncated: the pickle ends without its STOP"},
		{"global os.system and REDUCE", "\x80\x02cos\nsystem\nq\x00" + binunicode("ls") + "\x85R.", "at byte 2: names global os.system: a flight-recorder dump holds only dicts, lists, strings and numbers"},
		// And the rest of the rules.
		{"string past the end", "\x80\x02X" + u32(100) + "0123456789", "at byte 2: truncated: BINUNICODE wants 100 bytes, 10 are left"},
		{"BINUNICODE8 claims 2^63", "\x80\x04\x8d" + u64(1<<63) + "x.", "at byte 2: BINUNICODE8 of 9223372036854775808 bytes: over the 64 MiB limit on one string"},
		{"BINSTRING of negative length", "\x80\x02T\xff\xff\xff\xff.", "at byte 2: BINSTRING of negative length -1"},
		{"header cut short", "\x80\x02J\x01\x02", "at byte 2: truncated: BININT wants 4 bytes, 2 are left"},
		{"a dict set into itself", "\x80\x02}q\x00K\x01h\x00s.", "at byte 2: a dict made here holds itself (a cyclic pickle)"},
		{"a cycle through a tuple", "\x80\x02]q\x00h\x00\x85a.", "at byte 2: a list made here holds itself"},
		{"STACK_GLOBAL builtins.eval", "\x80\x04\x8c\x08builtins\x8c\x04eval\x93.", "at byte 18: names global builtins.eval: a flight-recorder dump holds only dicts"},
		{"a torch global not allowed", "\x80\x02ctorch.jit._pickle\nbuild_tensor_from_id\n.", "at byte 2: names global torch.jit._pickle.build_tensor_from_id"},
		{"a global named with a newline", "\x80\x04\x8c\x03a\nb\x8c\x01c\x93.", `at byte 10: names global "a\nb.c"`},
		{"a global line with no end", "\x80\x02cos\nsys", "at byte 2: truncated: GLOBAL's name has no newline before the end"},
		{"a global line too long", "\x80\x02c" + strings.Repeat("m", 300) + "\nx\n.", "at byte 2: GLOBAL's module is longer than 256 bytes"},
		{"REDUCE of a string", "\x80\x02" + binunicode("f") + ")R.", "at byte 9: REDUCE of a string: only torch.jit._pickle's list builders and type tag are applied"},
		{"REDUCE with two arguments", "\x80\x02ctorch.jit._pickle\nbuild_intlist\n]]\x86R.", "at byte 38: REDUCE of torch.jit._pickle.build_intlist with 2 arguments: it takes 1"},
		{"REDUCE of a builder on a dict", "\x80\x02ctorch.jit._pickle\nbuild_intlist\n}\x85R.", "with a dict: it takes a list"},
		{"REDUCE with a list of arguments", "\x80\x02ctorch.jit._pickle\nbuild_intlist\n]R.", "with a list: its arguments come as a tuple"},
		{"a global left as a value", "\x80\x02ctorch.jit._pickle\nbuild_intlist\n.", "at byte 2: global torch.jit._pickle.build_intlist is left as a value, not applied"},
		{"BUILD", "\x80\x02}}b.", "at byte 4: opcode BUILD (0x62): builds an object"},
		{"NEWOBJ", "\x80\x02N)\x81.", "at byte 4: opcode NEWOBJ (0x81): builds an object"},
		{"INST", "\x80\x02(ios\nsystem\n.", "at byte 3: opcode INST (0x69)"},
		{"OBJ", "\x80\x02(o.", "opcode OBJ (0x6f)"},
		{"PERSID", "\x80\x02P0\n.", "at byte 2: opcode PERSID (0x50): a persistent object"},
		{"BINPERSID", "\x80\x02NQ.", "opcode BINPERSID (0x51)"},
		{"EXT1", "\x80\x02\x82\x01.", "opcode EXT1 (0x82)"},
		{"a set", "\x80\x04\x8f.", "opcode EMPTY_SET (0x8f): a set"},
		{"protocol 0's INT", "\x80\x02I42\n.", "opcode INT (0x49): protocol 0's text form"},
		{"not an opcode", "\x80\x02\xff.", "at byte 2: byte 0xff is not a pickle opcode"},
		{"a 9-byte LONG1", "\x80\x02\x8a\x09" + strings.Repeat("\x01", 9) + ".", "at byte 2: LONG1 of 9 bytes: integers wider than 8 bytes are refused"},
		{"protocol 6", "\x80\x06N.", "at byte 0: protocol 6: this reads protocols 2 to 5"},
		{"BINGET of nothing", "\x80\x02h\x07.", "at byte 2: BINGET 7: nothing was put in memo 7"},
		{"a list as a dict key", "\x80\x02}]K\x01s.", "at byte 6: SETITEM: a dict key that is a list: a dump's keys are strings or integers"},
		{"odd SETITEMS", "\x80\x02}(K\x01u.", "at byte 6: SETITEMS of 1 values: keys and values come in pairs"},
		{"APPEND to a tuple", "\x80\x02)K\x01a.", "at byte 5: APPEND to a tuple, not a list"},
		{"SETITEM to a list", "\x80\x02]K\x01K\x02s.", "at byte 7: SETITEM to a list, not a dict"},
		{"APPENDS without a MARK", "\x80\x02]e.", "at byte 3: APPENDS without a MARK before it"},
		{"STOP on an empty stack", "\x80\x02.", "at byte 2: STOP with nothing on the stack to take"},
		{"a pop below a MARK", "\x80\x02](a.", "at byte 4: APPEND with nothing on the stack to take"},
		{"shared values written out", laughs(40), "comes to more than 4 MiB as JSON, its shared values written out where each occurs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "nccl_trace_rank_0")
			if err := os.WriteFile(path, []byte(c.pickle), 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := ReadFile(path)
			if err == nil {
				t.Fatalf("read %+v, want an error", d)
			}
			msg := err.Error()
			if strings.Count(msg, "\n") > 0 || !strings.HasPrefix(msg, "diag: "+path+": pickle: at byte ") || !strings.Contains(msg, c.want) {
				t.Errorf("error\n%q\nwant one line \"diag: %s: pickle: at byte N: RULE\" with\n%q", msg, path, c.want)
			}
		})
	}
}

// The object count limit (lowered here, as it is only a variable for
// this), and the file size limit, checked before the file is read (a
// sparse file, larger than the limit, with no data).
func TestReadPickleLimits(t *testing.T) {
	defer func(n int) { maxPickleObjects = n }(maxPickleObjects)
	maxPickleObjects = 1000
	b := "\x80\x02(" + strings.Repeat("N", 1001) + "l."
	if _, err := ReadPickle("p", []byte(b)); err == nil || err.Error() != "diag: p: pickle: at byte 1003: more than 1000 values: over the limit on a dump" {
		t.Errorf("1001 Nones: %v", err)
	}
	b = "\x80\x02(" + strings.Repeat("N", 999) + "l."
	if _, err := ReadPickle("p", []byte(b)); err != nil {
		t.Errorf("999 Nones: %v", err)
	}

	path := filepath.Join(t.TempDir(), "nccl_trace_rank_0")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0x80, 2}); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxDumpBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := fmt.Sprintf("diag: %s: pickle: at byte 0: the file is %d bytes: over the 512 MiB limit on a dump", path, MaxDumpBytes+1)
	if _, err := ReadFile(path); err == nil || err.Error() != want {
		t.Errorf("a file past the limit: %v, want %s", err, want)
	}
}

// Truncated at every byte, a real dump is refused in one line, never read.
func TestReadPickleTruncatedAnywhere(t *testing.T) {
	b, err := os.ReadFile("testdata/pytorch/pickle-py2/nccl_trace_rank_0")
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(b); n++ {
		_, err := ReadPickle("p", b[:n])
		if err == nil || !strings.Contains(err.Error(), "truncated") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("cut at %d: %v, want one line saying truncated", n, err)
		}
	}
}

func FuzzReadPickle(f *testing.F) {
	for _, dir := range []string{"pickle-py2", "pickle-py5"} {
		files, err := filepath.Glob(filepath.Join("testdata", "pytorch", dir, "nccl_trace_rank_*"))
		if err != nil || len(files) == 0 {
			f.Fatalf("no fixtures in %s (%v)", dir, err)
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add(torchPickle(jobOps.ranks()[3].dumpDict(), false))
	f.Add(torchPickle(jobStuck.ranks()[0].dumpDict(), true))
	f.Add(torchPickle(newDict("a", tIntList{1, 1 << 40}, "b", tDoubleList{0.5}, "c", tBoolList{true}, "d", tTuple{1, 2, 3, 4}), true))
	f.Add([]byte("\x80\x02]q\x00h\x00a."))
	f.Add([]byte("\x80\x02cos\nsystem\nq\x00" + binunicode("ls") + "\x85R."))
	f.Add([]byte(chain(5)))
	f.Add([]byte(laughs(4)))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ReadPickle("p", b)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "diag: p: pickle: at byte ") || strings.Contains(msg, "\n") {
				t.Fatalf("error %q: want one line \"diag: p: pickle: at byte N: RULE\"", msg)
			}
			return
		}
		if j := pickleJSON(v); !json.Valid(j) {
			t.Fatalf("decoded to invalid JSON %q", j)
		}
		d, err := ReadPyTorch("nccl_trace_rank_0", b)
		if err != nil {
			if d != nil || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q with dump %v", err, d)
			}
		} else if d.WorldRank != 0 {
			t.Fatalf("dump of rank %d", d.WorldRank)
		}
	})
}

// A small pickle that names one 64 KiB string 160 times comes to 10 MB of
// JSON: over the budget of its 66 KB (64 times it, plus 4 MiB), so it is
// refused in one line; bytes after its STOP buy it nothing (the budget
// counts the bytes up to the STOP); and no pickle's budget passes 128 MiB.
func TestReadPickleJSONBudget(t *testing.T) {
	p := "\x80\x02(" + binunicode(strings.Repeat("a", 64<<10)) + "q\x00" + strings.Repeat("h\x00", 159) + "l."
	dir := t.TempDir()
	for name, b := range map[string]string{"shared string": p, "padded after STOP": p + strings.Repeat("\x00", 1<<20)} {
		path := filepath.Join(dir, "nccl_trace_rank_0")
		if err := os.WriteFile(path, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadFile(path)
		want := fmt.Sprintf("diag: %s: pickle: at byte %d: a list made here comes to more than 8 MiB as JSON", path, len(p)-2)
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line beginning %q", name, err, want)
		}
	}
	if got := pickleJSONBudget(4 << 20); got != 128<<20 {
		t.Errorf("the budget of a 4 MiB pickle is %d, want the 128 MiB cap", got)
	}
	if got := pickleJSONBudget(1000); got != 64000+4<<20 {
		t.Errorf("the budget of a 1000-byte pickle is %d, want 64000 + 4 MiB", got)
	}
}

// The nesting limit holds through shared values: a list of 60 levels,
// converted first near the top, then met again inside 60 more, comes to
// 121 levels and is refused where it was made; 40 levels met again inside
// 40 more come to 81, and are read.
func TestReadPickleSharedDepth(t *testing.T) {
	nest := func(n int, inner string) string { return strings.Repeat("]", n) + inner + strings.Repeat("a", n) }
	deep := "\x80\x02]" + nest(60, "N") + "q\x00a" + nest(60, "h\x00") + "a."
	if _, err := ReadPickle("p", []byte(deep)); err == nil || err.Error() != "diag: p: pickle: at byte 3: values nested deeper than 100" {
		t.Errorf("a shared list of 60 levels met again under 61: %v", err)
	}
	ok := "\x80\x02]" + nest(40, "N") + "q\x00a" + nest(40, "h\x00") + "a."
	if _, err := ReadPickle("p", []byte(ok)); err != nil {
		t.Errorf("a shared list of 40 levels met again under 41: %v", err)
	}
}

// A pickle with several faults, one in each of a dict's values, is refused
// for the same one every time: the keys are checked in sorted order, not
// in Go's map order.
func TestReadPickleDeterministic(t *testing.T) {
	b := "\x80\x02}("
	for i := range 8 {
		b += binunicode(fmt.Sprintf("k%d", i)) + "]r" + u32(uint32(i)) + "j" + u32(uint32(i)) + "a" // a list appended into itself
	}
	b += "u."
	want := "diag: p: pickle: at byte 11: a list made here holds itself (a cyclic pickle): a flight-recorder dump is a tree"
	for range 50 {
		if _, err := ReadPickle("p", []byte(b)); err == nil || err.Error() != want {
			t.Fatalf("%v, want %s", err, want)
		}
	}
}

// Memo entries count against the object limit (lowered here), as the
// values pushed do.
func TestReadPickleMemoLimit(t *testing.T) {
	defer func(n int) { maxPickleObjects = n }(maxPickleObjects)
	maxPickleObjects = 1000
	b := "\x80\x02N"
	for i := range 1000 {
		b += "r" + u32(uint32(i))
	}
	want := fmt.Sprintf("diag: p: pickle: at byte %d: more than 1000 values: over the limit on a dump", 3+5*999)
	if _, err := ReadPickle("p", []byte(b+".")); err == nil || err.Error() != want {
		t.Errorf("1 None memoized 1000 times: %v, want %s", err, want)
	}
}

// The object limit fits a dump of 20000 entries (ten times PyTorch's
// default ring), here a tenth of one with 40 frames an entry, and is no
// more than 4 Mi: a file of NONEs between a MARK and a LIST, or of
// LONG_BINPUTs, costs some hundreds of MiB at most.
func TestPickleObjectLimit(t *testing.T) {
	var job []frFrame
	for i := range 38 {
		job = append(job, frFrame{fmt.Sprintf("frame%d", i), fmt.Sprintf("/w/job/f%d.py", i), int64(i)})
	}
	r := frRank{rank: 0, version: "2.10", groups: []frGroup{worldGroup(4)}}
	for i := range 2000 {
		r.entries = append(r.entries, frEntry{group: worldGroup(4), seq: int64(i + 1), op: "all_reduce", in: [][]int64{{2048, 1024}},
			out: [][]int64{{2048, 1024}}, dtype: "BFloat16", state: "completed", created: int64(i), frames: frStack("all_reduce", job...)})
	}
	u := unpickler{b: torchPickle(r.dumpDict(), false), memo: map[uint32]any{}}
	if _, err := u.run(); err != nil {
		t.Fatal(err)
	}
	if n := 10 * u.objects; n >= maxPickleObjects || maxPickleObjects > 1<<22 {
		t.Errorf("a 20000-entry dump has about %d values; the limit is %d, want above that and at most 4 Mi", n, maxPickleObjects)
	}
}
