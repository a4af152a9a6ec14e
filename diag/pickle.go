package diag

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// A reader of Python pickles, as much of the format as a PyTorch
// flight-recorder dump uses, written to read untrusted files safely: it
// executes nothing, and builds only the values a dump holds.
//
// FlightRecorder::dump pickles the dump dict with torch's C++ Pickler at
// protocol 2 (torch/csrc/jit/serialization/pickler.cpp): PROTO 2; a dict
// as EMPTY_DICT, MARK, its keys and values, SETITEMS; a list as
// EMPTY_LIST, MARK, its items, APPENDS; a dict or list it holds more than
// once (the stack frames every entry shares) written once, memoized with
// BINPUT (LONG_BINPUT past 255) and referred to with BINGET (LONG_BINGET);
// a string as BINUNICODE followed by a BINPUT, a repeated one as a BINGET;
// an int as BININT1, BININT2, BININT or an 8-byte LONG1; a double as
// BINFLOAT; NEWTRUE, NEWFALSE, NONE; a tuple as EMPTY_TUPLE, TUPLE1, 2, 3
// or MARK ... TUPLE; STOP. A Pickler that tags aggregates wraps a dict or
// list in torch.jit._pickle.restore_type_tag(value, "Dict[str, Any]"), and
// a typed list is torch.jit._pickle.build_intlist([...]) (build_doublelist,
// build_boollist): a GLOBAL, the list in a one-tuple, REDUCE. Python's own
// pickle module adds, at protocol 2, APPEND, SETITEM, LIST, DICT, DUP,
// POP, POP_MARK, BINSTRING and SHORT_BINSTRING, LONG1 and LONG4 for large
// ints, and at protocols 4 and 5 FRAME, SHORT_BINUNICODE, BINUNICODE8,
// MEMOIZE, STACK_GLOBAL, and the BINBYTES opcodes: all read.
//
// What it builds: map[string]any for a dict (an integer key becomes its
// decimal string, as JSON has it; any other key is refused), []any for a
// list or a tuple, string (for bytes too), int64 (a LONG1 or LONG4 of at
// most 8 bytes; a wider integer is refused), float64, bool and nil. A value
// the pickle holds in several places is one value shared.
//
// What it refuses, each as one line "pickle: at byte OFFSET: RULE":
// a GLOBAL or STACK_GLOBAL naming anything but torch.jit._pickle's
// build_intlist, build_doublelist, build_boollist, build_genericlist and
// restore_type_tag (by its name, e.g. "names global os.system"); REDUCE of
// anything else; INST, OBJ, NEWOBJ, NEWOBJ_EX, BUILD, PERSID, BINPERSID,
// EXT1/2/4, sets and out-of-band buffers (by name); protocol 0's text
// opcodes; a string or bytes longer than maxPickleString (the header is
// checked before anything is allocated) or longer than what is left of
// the file ("truncated"); MARKs nested deeper than maxPickleDepth, and
// values nested deeper; a list, tuple or dict that holds itself (a cyclic
// pickle); more than maxPickleObjects values pushed and memoized; values
// that, written out as JSON with every shared value repeated, would exceed
// pickleJSONBudget of the bytes up to the STOP; a pickle that ends before
// its STOP ("truncated"). Bytes after the STOP are ignored, as Python's
// pickle.load ignores them, and count for nothing. A dict's keys are
// checked in sorted order, so that a pickle with two faults is refused
// for the same one every time it is read.
const (
	// MaxDumpBytes bounds the size of a dump file: ReadFile checks it
	// before it reads one.
	MaxDumpBytes = 512 << 20
	// maxPickleString bounds one string or bytes value.
	maxPickleString = 64 << 20
	// maxPickleDepth bounds MARK nesting, and the nesting of the values.
	maxPickleDepth = 100
	// maxPickleGlobal bounds a GLOBAL's module and name lines.
	maxPickleGlobal = 256
)

// maxPickleObjects bounds the values a pickle pushes plus the memo entries
// it puts: a dump of 20000 entries (ten times PyTorch's default ring of
// 2000) with 40 frames each has about 1.9 million, with 4 frames about 1.2
// million (TestPickleObjectLimit). At 4 Mi, a pickle that pushes nothing
// but NONEs between a MARK and a LIST, or memoizes nothing but
// LONG_BINPUTs, peaks at some hundreds of MiB, not gigabytes. A variable
// only so that a test can lower it.
var maxPickleObjects = 1 << 22

// pickleJSONBudget is how many bytes of JSON the decoded value of a pickle
// of n bytes up to its STOP may come to, shared values written out
// wherever they occur (ReadPyTorch reads the dump as that JSON, which its
// JSON reader copies once or twice more). A real dump's entries share
// their stack frames, each a LONG_BINGET of 5 bytes that comes to some 100
// to 300 bytes as JSON: 20000 entries of 4 Python frames come to 8 times
// the pickle (3.3 MB, 26 MB of JSON), of 40 long C++ frames
// (TORCH_NCCL_TRACE_CPP_STACK) 45 times (4.7 MB, 211 MB), and the ring
// PyTorch keeps by default, 2000 such entries, to 21 MB. So 64 times the
// pickle, and at least 4 MiB, but never more than 128 MiB: every dump of
// 20000 entries with Python stacks, or of 2000 with C++ stacks, fits,
// while a small pickle that names one long string, or one list, from many
// places costs at most 128 MiB of JSON, not gigabytes. (The largest dumps
// with C++ stacks are refused: re-saved as JSON, they are read as JSON.)
func pickleJSONBudget(n int) int64 { return min(64*int64(n)+4<<20, 128<<20) }

// pickleAllowed are the globals a dump may name, all of torch.jit._pickle:
// each returns its (first) argument.
var pickleAllowed = map[string]int{ // name: how many arguments it takes
	"build_intlist":     1,
	"build_doublelist":  1,
	"build_boollist":    1,
	"build_genericlist": 1,
	"restore_type_tag":  2,
}

const pickleModule = "torch.jit._pickle"

// pickleProto is the PROTO opcode, the first byte of every pickle of
// protocol 2 or later.
const pickleProto = 0x80

// ReadPickle decodes the pickle b (see above); path names the file in
// errors, which are one line: "diag: PATH: pickle: at byte N: RULE".
func ReadPickle(path string, b []byte) (any, error) {
	u := unpickler{b: b, memo: map[uint32]any{}}
	v, err := u.run()
	if err == nil {
		// The budget counts the bytes up to the STOP (u.pos is past it):
		// bytes after it are ignored, and buy nothing.
		c := pickleConverter{budget: pickleJSONBudget(u.pos), done: map[*pkList]pkConverted{}, doneDict: map[*pkDict]pkConverted{}, open: map[any]bool{}}
		v, _, _, err = c.convert(v, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("diag: %s: pickle: %w", path, err)
	}
	return v, nil
}

type pickleError struct {
	off  int
	rule string
}

func (e *pickleError) Error() string { return fmt.Sprintf("at byte %d: %s", e.off, e.rule) }

// The values while decoding: lists, tuples and dicts by reference (a memo
// entry and the stack share one), a global until a REDUCE applies it.
type (
	pkList struct {
		items []any
		tuple bool
		off   int // where it was made, for errors
	}
	pkDict struct {
		m   map[string]any
		off int
	}
	pkGlobal struct {
		name string // the allowed function, in torch.jit._pickle
		off  int
	}
)

type unpickler struct {
	b       []byte
	pos     int
	op      int // offset of the opcode being run
	stack   []any
	marks   []int
	memo    map[uint32]any
	objects int
}

func (u *unpickler) errf(format string, args ...any) error {
	return &pickleError{off: u.op, rule: fmt.Sprintf(format, args...)}
}

// take returns the next n bytes, or an error naming what wanted them.
func (u *unpickler) take(n uint64, what string) ([]byte, error) {
	if left := uint64(len(u.b) - u.pos); n > left {
		return nil, u.errf("truncated: %s wants %d bytes, %d are left", what, n, left)
	}
	s := u.b[u.pos : u.pos+int(n)]
	u.pos += int(n)
	return s, nil
}

func (u *unpickler) uint(n int, what string) (uint64, error) {
	s, err := u.take(uint64(n), what)
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v, nil
}

// text reads a string or bytes value whose length the opcode's n-byte
// header gives: the limit is checked before anything is allocated.
func (u *unpickler) text(n int, name string) error {
	size, err := u.uint(n, name+" length")
	if err != nil {
		return err
	}
	if name == "BINSTRING" && int32(size) < 0 {
		return u.errf("%s of negative length %d", name, int32(size))
	}
	if size > maxPickleString {
		return u.errf("%s of %d bytes: over the %d MiB limit on one string", name, size, maxPickleString>>20)
	}
	s, err := u.take(size, name)
	if err != nil {
		return err
	}
	return u.push(string(s))
}

func (u *unpickler) push(v any) error {
	u.objects++
	if u.objects > maxPickleObjects {
		return u.errf("more than %d values: over the limit on a dump", maxPickleObjects)
	}
	u.stack = append(u.stack, v)
	return nil
}

func (u *unpickler) pop(name string) (any, error) {
	if len(u.stack) == 0 || len(u.marks) > 0 && len(u.stack) == u.marks[len(u.marks)-1] {
		return nil, u.errf("%s with nothing on the stack to take", name)
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top(name string) (any, error) {
	if len(u.stack) == 0 || len(u.marks) > 0 && len(u.stack) == u.marks[len(u.marks)-1] {
		return nil, u.errf("%s with nothing on the stack", name)
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark returns the values above the last MARK and drops them and it.
func (u *unpickler) popMark(name string) ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.errf("%s without a MARK before it", name)
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) list(name string) (*pkList, error) {
	v, err := u.top(name)
	if err != nil {
		return nil, err
	}
	l, ok := v.(*pkList)
	if !ok || l.tuple {
		return nil, u.errf("%s to %s, not a list", name, pickleKind(v))
	}
	return l, nil
}

func (u *unpickler) setItems(name string, kv []any) error {
	v, err := u.top(name)
	if err != nil {
		return err
	}
	d, ok := v.(*pkDict)
	if !ok {
		return u.errf("%s to %s, not a dict", name, pickleKind(v))
	}
	if len(kv)%2 != 0 {
		return u.errf("%s of %d values: keys and values come in pairs", name, len(kv))
	}
	for i := 0; i < len(kv); i += 2 {
		var key string
		switch k := kv[i].(type) {
		case string:
			key = k
		case int64:
			key = strconv.FormatInt(k, 10) // as JSON writes an integer key
		default:
			return u.errf("%s: a dict key that is %s: a dump's keys are strings or integers", name, pickleKind(k))
		}
		d.m[key] = kv[i+1]
	}
	return nil
}

// global checks a global the pickle names: only torch.jit._pickle's list
// builders and type tag are allowed, by name.
func (u *unpickler) global(module, name string) error {
	if _, ok := pickleAllowed[name]; !ok || module != pickleModule {
		return u.errf("names global %s: a flight-recorder dump holds only dicts, lists, strings and numbers", printable(module+"."+name))
	}
	return u.push(pkGlobal{name: name, off: u.op})
}

func (u *unpickler) line(what string) (string, error) {
	end := u.pos + maxPickleGlobal + 1
	if end > len(u.b) {
		end = len(u.b)
	}
	i := bytes.IndexByte(u.b[u.pos:end], '\n')
	if i < 0 {
		if end == len(u.b) {
			return "", u.errf("truncated: GLOBAL's %s has no newline before the end", what)
		}
		return "", u.errf("GLOBAL's %s is longer than %d bytes", what, maxPickleGlobal)
	}
	s := string(u.b[u.pos : u.pos+i])
	u.pos += i + 1
	return s, nil
}

// The opcodes refused by name, and why.
var pickleRefused = map[byte]string{
	'i': "INST", 'o': "OBJ", 0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 'b': "BUILD",
	'P': "PERSID", 'Q': "BINPERSID", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4",
	0x8f: "EMPTY_SET", 0x90: "ADDITEMS", 0x91: "FROZENSET", 0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
	'I': "INT", 'L': "LONG", 'F': "FLOAT", 'S': "STRING", 'V': "UNICODE", 'p': "PUT", 'g': "GET",
}

func (u *unpickler) run() (any, error) {
	for {
		u.op = u.pos
		if u.pos >= len(u.b) {
			return nil, u.errf("truncated: the pickle ends without its STOP")
		}
		c := u.b[u.pos]
		u.pos++
		var err error
		switch c {
		case pickleProto:
			var v uint64
			if v, err = u.uint(1, "PROTO"); err == nil && (v < 2 || v > 5) {
				err = u.errf("protocol %d: this reads protocols 2 to 5", v)
			}
		case 0x95: // FRAME: a length that only helps a reader buffer
			_, err = u.uint(8, "FRAME")
		case '.': // STOP
			v, err := u.pop("STOP")
			if err != nil {
				return nil, err
			}
			return v, nil
		case '(': // MARK
			if len(u.marks) >= maxPickleDepth {
				return nil, u.errf("MARK nested deeper than %d", maxPickleDepth)
			}
			u.marks = append(u.marks, len(u.stack))
		case '0': // POP
			if len(u.marks) > 0 && u.marks[len(u.marks)-1] == len(u.stack) {
				_, err = u.popMark("POP")
			} else {
				_, err = u.pop("POP")
			}
		case '1': // POP_MARK
			_, err = u.popMark("POP_MARK")
		case '2': // DUP
			var v any
			if v, err = u.top("DUP"); err == nil {
				err = u.push(v)
			}
		case 'N':
			err = u.push(nil)
		case 0x88:
			err = u.push(true)
		case 0x89:
			err = u.push(false)
		case 'K': // BININT1
			var v uint64
			if v, err = u.uint(1, "BININT1"); err == nil {
				err = u.push(int64(v))
			}
		case 'M': // BININT2
			var v uint64
			if v, err = u.uint(2, "BININT2"); err == nil {
				err = u.push(int64(v))
			}
		case 'J': // BININT
			var v uint64
			if v, err = u.uint(4, "BININT"); err == nil {
				err = u.push(int64(int32(uint32(v))))
			}
		case 0x8a, 0x8b: // LONG1, LONG4
			err = u.long(c)
		case 'G': // BINFLOAT, big-endian
			var s []byte
			if s, err = u.take(8, "BINFLOAT"); err == nil {
				err = u.push(math.Float64frombits(binary.BigEndian.Uint64(s)))
			}
		case 'X':
			err = u.text(4, "BINUNICODE")
		case 0x8c:
			err = u.text(1, "SHORT_BINUNICODE")
		case 0x8d:
			err = u.text(8, "BINUNICODE8")
		case 'T':
			err = u.text(4, "BINSTRING")
		case 'U':
			err = u.text(1, "SHORT_BINSTRING")
		case 'C':
			err = u.text(1, "SHORT_BINBYTES")
		case 'B':
			err = u.text(4, "BINBYTES")
		case 0x8e:
			err = u.text(8, "BINBYTES8")
		case 0x96:
			err = u.text(8, "BYTEARRAY8")
		case ']':
			err = u.push(&pkList{items: []any{}, off: u.op})
		case ')':
			err = u.push(&pkList{items: []any{}, tuple: true, off: u.op})
		case '}':
			err = u.push(&pkDict{m: map[string]any{}, off: u.op})
		case 'l', 't': // LIST, TUPLE: the values above the MARK
			var items []any
			if items, err = u.popMark(map[byte]string{'l': "LIST", 't': "TUPLE"}[c]); err == nil {
				err = u.push(&pkList{items: items, tuple: c == 't', off: u.op})
			}
		case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
			n := int(c-0x85) + 1
			items := make([]any, n)
			for i := n - 1; i >= 0 && err == nil; i-- {
				items[i], err = u.pop(fmt.Sprintf("TUPLE%d", n))
			}
			if err == nil {
				err = u.push(&pkList{items: items, tuple: true, off: u.op})
			}
		case 'd': // DICT: the keys and values above the MARK
			var kv []any
			if kv, err = u.popMark("DICT"); err == nil {
				if err = u.push(&pkDict{m: map[string]any{}, off: u.op}); err == nil {
					err = u.setItems("DICT", kv)
				}
			}
		case 'a': // APPEND
			var v any
			if v, err = u.pop("APPEND"); err == nil {
				var l *pkList
				if l, err = u.list("APPEND"); err == nil {
					l.items = append(l.items, v)
				}
			}
		case 'e': // APPENDS
			var items []any
			if items, err = u.popMark("APPENDS"); err == nil {
				var l *pkList
				if l, err = u.list("APPENDS"); err == nil {
					l.items = append(l.items, items...)
				}
			}
		case 's': // SETITEM
			var k, v any
			if v, err = u.pop("SETITEM"); err == nil {
				if k, err = u.pop("SETITEM"); err == nil {
					err = u.setItems("SETITEM", []any{k, v})
				}
			}
		case 'u': // SETITEMS
			var kv []any
			if kv, err = u.popMark("SETITEMS"); err == nil {
				err = u.setItems("SETITEMS", kv)
			}
		case 'q', 'r', 0x94: // BINPUT, LONG_BINPUT, MEMOIZE
			err = u.put(c)
		case 'h', 'j': // BINGET, LONG_BINGET
			n, name := 1, "BINGET"
			if c == 'j' {
				n, name = 4, "LONG_BINGET"
			}
			var i uint64
			if i, err = u.uint(n, name); err == nil {
				v, ok := u.memo[uint32(i)]
				if !ok {
					err = u.errf("%s %d: nothing was put in memo %d", name, i, i)
				} else {
					err = u.push(v)
				}
			}
		case 'c': // GLOBAL module\nname\n
			var module, name string
			if module, err = u.line("module"); err == nil {
				if name, err = u.line("name"); err == nil {
					err = u.global(module, name)
				}
			}
		case 0x93: // STACK_GLOBAL
			var m, n any
			if n, err = u.pop("STACK_GLOBAL"); err == nil {
				if m, err = u.pop("STACK_GLOBAL"); err == nil {
					module, ok1 := m.(string)
					name, ok2 := n.(string)
					if !ok1 || !ok2 {
						err = u.errf("STACK_GLOBAL of %s and %s: wants two strings", pickleKind(m), pickleKind(n))
					} else {
						err = u.global(module, name)
					}
				}
			}
		case 'R': // REDUCE
			err = u.reduce()
		default:
			if name, ok := pickleRefused[c]; ok {
				return nil, u.errf("opcode %s (0x%02x): %s", name, c, refusedWhy(c))
			}
			return nil, u.errf("byte 0x%02x is not a pickle opcode", c)
		}
		if err != nil {
			return nil, err
		}
	}
}

func refusedWhy(c byte) string {
	switch c {
	case 'I', 'L', 'F', 'S', 'V', 'p', 'g':
		return "protocol 0's text form: this reads the binary protocols 2 to 5"
	case 'P', 'Q':
		return "a persistent object, which only its writer can load: a flight-recorder dump holds only dicts, lists, strings and numbers"
	case 0x8f, 0x90, 0x91:
		return "a set: a flight-recorder dump holds only dicts, lists, strings and numbers"
	}
	return "builds an object: a flight-recorder dump holds only dicts, lists, strings and numbers"
}

// long reads LONG1 or LONG4: a little-endian two's-complement integer of
// at most 8 bytes.
func (u *unpickler) long(c byte) error {
	n, name := 1, "LONG1"
	if c == 0x8b {
		n, name = 4, "LONG4"
	}
	size, err := u.uint(n, name+" length")
	if err != nil {
		return err
	}
	if size > 8 {
		return u.errf("%s of %d bytes: integers wider than 8 bytes are refused", name, size)
	}
	s, err := u.take(size, name)
	if err != nil {
		return err
	}
	var v uint64
	for i := len(s) - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	if k := len(s); k > 0 && k < 8 && s[k-1]&0x80 != 0 {
		v |= ^uint64(0) << (8 * k) // sign-extend
	}
	return u.push(int64(v))
}

func (u *unpickler) put(c byte) error {
	v, err := u.top("BINPUT")
	if err != nil {
		return err
	}
	var i uint64
	switch c {
	case 'q':
		i, err = u.uint(1, "BINPUT")
	case 'r':
		i, err = u.uint(4, "LONG_BINPUT")
	default: // MEMOIZE: the next index
		i = uint64(len(u.memo))
	}
	if err != nil {
		return err
	}
	u.objects++
	if u.objects > maxPickleObjects {
		return u.errf("more than %d values: over the limit on a dump", maxPickleObjects)
	}
	u.memo[uint32(i)] = v
	return nil
}

// reduce applies an allowed global to its argument tuple: each returns its
// first argument (the list a typed-list builder wraps, the value a type
// tag annotates).
func (u *unpickler) reduce() error {
	args, err := u.pop("REDUCE")
	if err != nil {
		return err
	}
	f, err := u.pop("REDUCE")
	if err != nil {
		return err
	}
	g, ok := f.(pkGlobal)
	if !ok {
		return u.errf("REDUCE of %s: only torch.jit._pickle's list builders and type tag are applied", pickleKind(f))
	}
	t, ok := args.(*pkList)
	if !ok || !t.tuple {
		return u.errf("REDUCE of %s.%s with %s: its arguments come as a tuple", pickleModule, g.name, pickleKind(args))
	}
	if want := pickleAllowed[g.name]; len(t.items) != want {
		return u.errf("REDUCE of %s.%s with %d arguments: it takes %d", pickleModule, g.name, len(t.items), want)
	}
	if g.name != "restore_type_tag" {
		if l, ok := t.items[0].(*pkList); !ok || l.tuple {
			return u.errf("REDUCE of %s.%s with %s: it takes a list", pickleModule, g.name, pickleKind(t.items[0]))
		}
	}
	u.objects-- // push counts it again
	return u.push(t.items[0])
}

// pickleKind names a decoded value's type for an error.
func pickleKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "a bool"
	case int64:
		return "an int"
	case float64:
		return "a float"
	case string:
		return "a string"
	case *pkList:
		if x.tuple {
			return "a tuple"
		}
		return "a list"
	case *pkDict:
		return "a dict"
	case pkGlobal:
		return "global " + pickleModule + "." + x.name
	}
	return fmt.Sprintf("%T", v)
}

// plainKind names the type of a value ReadPickle returned, for an error.
func plainKind(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case map[string]any:
		return "a dict"
	}
	return pickleKind(v)
}

// printable is s, quoted if it holds a character that is not printable
// (an error stays one readable line).
func printable(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// pickleConverter turns the decoded values into plain ones (map[string]any,
// []any, ...), checking what only the whole can show: nesting depth,
// cycles, a global left as a value, and how large the value comes to as
// JSON with its shared values written out wherever they occur. A shared
// value is converted once; met again, its cached size counts against the
// budget and its cached height against the nesting limit at the depth it
// is met. A dict's values are converted in the order of its sorted keys.
type pickleConverter struct {
	budget   int64
	done     map[*pkList]pkConverted
	doneDict map[*pkDict]pkConverted
	open     map[any]bool // the containers being converted: one met again is a cycle
}

type pkConverted struct {
	v      any
	size   int64 // its JSON size
	height int   // the levels of lists and dicts it nests, itself included
}

// convert returns v's plain value, its JSON size and its height (0 for a
// scalar); depth is how many lists and dicts hold it.
func (c *pickleConverter) convert(v any, depth int) (any, int64, int, error) {
	switch x := v.(type) {
	case nil:
		return nil, 4, 0, nil
	case bool:
		return x, 5, 0, nil
	case int64:
		return x, 20, 0, nil
	case float64:
		return x, 24, 0, nil
	case string:
		return x, jsonStringLen(x), 0, nil
	case pkGlobal:
		return nil, 0, 0, &pickleError{off: x.off, rule: fmt.Sprintf("global %s.%s is left as a value, not applied: a flight-recorder dump holds only dicts, lists, strings and numbers", pickleModule, x.name)}
	case *pkList:
		if r, ok := c.done[x]; ok {
			return c.again(r, x.off, depth)
		}
		if err := c.enter(x, x.off, depth, pickleKind(x)); err != nil {
			return nil, 0, 0, err
		}
		out := make([]any, len(x.items))
		size, height := int64(2+len(x.items)), 1
		for i, item := range x.items {
			var n int64
			var h int
			var err error
			if out[i], n, h, err = c.convert(item, depth+1); err != nil {
				return nil, 0, 0, err
			}
			size += n
			height = max(height, h+1)
		}
		if err := c.leave(x, x.off, size, pickleKind(x)); err != nil {
			return nil, 0, 0, err
		}
		c.done[x] = pkConverted{out, size, height}
		return out, size, height, nil
	case *pkDict:
		if r, ok := c.doneDict[x]; ok {
			return c.again(r, x.off, depth)
		}
		if err := c.enter(x, x.off, depth, "a dict"); err != nil {
			return nil, 0, 0, err
		}
		keys := make([]string, 0, len(x.m))
		for k := range x.m {
			keys = append(keys, k)
		}
		sort.Strings(keys) // not map order: the same pickle, the same error
		out := make(map[string]any, len(x.m))
		size, height := int64(2+2*len(x.m)), 1
		for _, k := range keys {
			v, n, h, err := c.convert(x.m[k], depth+1)
			if err != nil {
				return nil, 0, 0, err
			}
			out[k] = v
			size += jsonStringLen(k) + n
			height = max(height, h+1)
		}
		if err := c.leave(x, x.off, size, "a dict"); err != nil {
			return nil, 0, 0, err
		}
		c.doneDict[x] = pkConverted{out, size, height}
		return out, size, height, nil
	}
	return nil, 0, 0, &pickleError{rule: fmt.Sprintf("a value of type %T", v)} // not reached: the decoder makes none
}

// again is a shared list or dict met once more, at depth: converted
// already, its levels still count from where it is met.
func (c *pickleConverter) again(r pkConverted, off, depth int) (any, int64, int, error) {
	if depth+r.height > maxPickleDepth {
		return nil, 0, 0, &pickleError{off: off, rule: fmt.Sprintf("values nested deeper than %d", maxPickleDepth)}
	}
	return r.v, r.size, r.height, nil
}

func (c *pickleConverter) enter(x any, off, depth int, kind string) error {
	if depth >= maxPickleDepth {
		return &pickleError{off: off, rule: fmt.Sprintf("values nested deeper than %d", maxPickleDepth)}
	}
	if c.open[x] {
		return &pickleError{off: off, rule: fmt.Sprintf("%s made here holds itself (a cyclic pickle): a flight-recorder dump is a tree", kind)}
	}
	c.open[x] = true
	return nil
}

func (c *pickleConverter) leave(x any, off int, size int64, kind string) error {
	delete(c.open, x)
	if size > c.budget {
		return &pickleError{off: off, rule: fmt.Sprintf("%s made here comes to more than %d MiB as JSON, its shared values written out where each occurs: over the limit for a pickle of this size", kind, c.budget>>20)}
	}
	return nil
}

// pickleJSON writes a value ReadPickle returned as JSON: maps with their
// keys sorted, a float that JSON cannot hold (NaN, an infinity) as null.
// ReadPickle has bounded its size.
func pickleJSON(v any) []byte {
	var b []byte
	var w func(v any)
	w = func(v any) {
		switch x := v.(type) {
		case nil:
			b = append(b, "null"...)
		case bool:
			b = strconv.AppendBool(b, x)
		case int64:
			b = strconv.AppendInt(b, x, 10)
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				b = append(b, "null"...)
			} else {
				b = strconv.AppendFloat(b, x, 'g', -1, 64)
			}
		case string:
			b = appendJSONString(b, x)
		case []any:
			b = append(b, '[')
			for i, item := range x {
				if i > 0 {
					b = append(b, ',')
				}
				w(item)
			}
			b = append(b, ']')
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			b = append(b, '{')
			for i, k := range keys {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, k)
				b = append(b, ':')
				w(x[k])
			}
			b = append(b, '}')
		}
	}
	w(v)
	return b
}

// appendJSONString appends s as a JSON string: quotes and backslashes
// escaped, control characters as \u00XX, bytes that are not UTF-8 as
// U+FFFD. jsonStringLen is its length.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20:
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

func jsonStringLen(s string) int64 {
	n := int64(2)
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			n += 2
		case r < 0x20:
			n += 6
		default:
			n += int64(utf8.RuneLen(r))
		}
	}
	return n
}
