package diag

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func readDir(t *testing.T, dir string) []*Dump {
	t.Helper()
	d, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A PyTorch job whose rank 3 wrote no dump: ranks 0-2 wait in all_reduce
// #5; the story names rank 3 as missing and its last collective (#4, which
// its peers completed).
func TestAnalyzePyTorchMissingRank(t *testing.T) {
	s := Analyze(readDir(t, "testdata/pytorch/missing"))
	if !slices.Equal(s.NoDump, []int{3}) || !slices.Equal(s.Dumped, []int{0, 1, 2}) {
		t.Fatalf("dumped %v, no dump %v: want [0 1 2] and [3]", s.Dumped, s.NoDump)
	}
	if s.Mismatch != nil {
		t.Errorf("mismatch %+v: the ranks that dumped agree", s.Mismatch)
	}
	if len(s.Waits) != 1 {
		t.Fatalf("waits %+v, want one", s.Waits)
	}
	w := s.Waits[0]
	if w.Group != "0" || w.Seq != 5 || w.Kind != "all_reduce" || !slices.Equal(w.Waiting, []int{0, 1, 2}) {
		t.Errorf("wait %+v, want ranks [0 1 2] in all_reduce #5 on group 0", w)
	}
	if len(w.Absent) != 1 || w.Absent[0].Rank != 3 || !w.Absent[0].NoDump || w.Absent[0].Last != 4 {
		t.Errorf("absent %+v, want rank 3 (no dump) last at #4", w.Absent)
	}
	var b bytes.Buffer
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"no dump from world ranks [3]", `ranks [0 1 2] wait in "0" #5 (all_reduce`, "rank 3 (no dump", "last collective there is #4"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("story lacks %q:\n%s", want, b.String())
		}
	}
}

// A PyTorch job whose rank 2 entered all_gather where the others entered
// all_reduce (#7): the story names the mismatch and each side.
func TestAnalyzePyTorchMismatch(t *testing.T) {
	s := Analyze(readDir(t, "testdata/pytorch/mismatch"))
	if len(s.NoDump) != 0 {
		t.Errorf("no dump %v, want none", s.NoDump)
	}
	m := s.Mismatch
	if m == nil || m.Group != "0" || m.Seq != 7 || len(m.Sides) != 2 {
		t.Fatalf("mismatch %+v, want #7 on group 0 with two sides", m)
	}
	if !slices.Equal(m.Sides[0].Ranks, []int{0, 1, 3}) || m.Sides[0].Kind != "all_reduce" ||
		!slices.Equal(m.Sides[1].Ranks, []int{2}) || m.Sides[1].Kind != "all_gather" {
		t.Errorf("sides %+v, want [0 1 3] all_reduce and [2] all_gather", m.Sides)
	}
	var b bytes.Buffer
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `first mismatch: "0" #7`) || !strings.Contains(b.String(), "ranks [2] entered all_gather") {
		t.Errorf("story does not name the mismatch:\n%s", b.String())
	}
}

// rankrun's dumps: a desync whose sides are the same site reached from two
// branches (the whole paths differ) names each side's guard values; a rank
// with no dump is absent from a wait, holds the requests whose sessions
// name it, and its last collective is what its peers' counts say.
func TestAnalyzeRankrunDumps(t *testing.T) {
	path := func(branch string) string {
		return "transceiver/check.go:157 (check) < executor/base.go:158 (check) < " + branch + " < executor/run.go:170 (runLoop)"
	}
	desync := []*Dump{
		{Source: "rankrun", WorldRank: 0, WorldSize: 2, Groups: []Group{{Name: "g", Ranks: []int{0, 1}, Entered: 2}},
			Ops: []Op{{Group: "g", Seq: 1, Kind: "Allgather", Peer: -1, StartNS: 1, EndNS: 2},
				{Group: "g", Seq: 2, Kind: "Allgather", Site: "transceiver/check.go:157 (check)", Path: path("executor/ctx.go:42 (run)"), Peer: -1, StartNS: 3, EndNS: 4, Err: "desync",
					Guards: []Guard{{Name: "sends_held", Value: "true"}}}}},
		{Source: "rankrun", WorldRank: 1, WorldSize: 2, Groups: []Group{{Name: "g", Ranks: []int{0, 1}, Entered: 2}},
			Ops: []Op{{Group: "g", Seq: 1, Kind: "Allgather", Peer: -1, StartNS: 1, EndNS: 2},
				{Group: "g", Seq: 2, Kind: "Allgather", Site: "transceiver/check.go:157 (check)", Path: path("executor/ctx.go:30 (run)"), Peer: -1, StartNS: 3, EndNS: 4, Err: "desync",
					Guards: []Guard{{Name: "fits", Value: "0"}}}}},
	}
	s := Analyze(desync)
	m := s.Mismatch
	if m == nil || m.Seq != 2 || len(m.Sides) != 2 {
		t.Fatalf("mismatch %+v, want #2 with two sides", m)
	}
	if g := guardsText(m.Sides[0].Guards); g != "sends_held=true" {
		t.Errorf("rank 0's side has guards %q, want sends_held=true", g)
	}
	if g := guardsText(m.Sides[1].Guards); g != "fits=0" {
		t.Errorf("rank 1's side has guards %q, want fits=0", g)
	}
	if m.Parted != "executor/ctx.go:42 (run) vs executor/ctx.go:30 (run)" {
		t.Errorf("parted %q", m.Parted)
	}

	frozen := []*Dump{
		{Source: "rankrun", WorldRank: 0, WorldSize: 3, Groups: []Group{{Name: "world", Ranks: []int{0, 1, 2}, Entered: 3}},
			Sessions: []Session{{Request: 7, Role: "send", Peers: []int{1, 2}, State: "transferring"}, {Request: 8, Role: "send", Peers: []int{1}}}},
		{Source: "rankrun", WorldRank: 1, WorldSize: 3, Groups: []Group{{Name: "world", Ranks: []int{0, 1, 2}, Entered: 3}, {Name: "gen", Ranks: []int{1, 2}, Entered: 41}},
			Ops: []Op{{Group: "gen", Seq: 40, Kind: "Allreduce", Peer: -1, StartNS: 5, EndNS: 6},
				{Group: "gen", Seq: 41, Kind: "Allreduce", Peer: -1, StartNS: 7, Err: "timeout"}}},
	}
	s = Analyze(frozen)
	if !slices.Equal(s.NoDump, []int{2}) {
		t.Fatalf("no dump %v, want [2]", s.NoDump)
	}
	if len(s.Waits) != 1 || s.Waits[0].Group != "gen" || s.Waits[0].Seq != 41 || len(s.Waits[0].Absent) != 1 {
		t.Fatalf("waits %+v, want rank 1 waiting in gen #41 with one absent", s.Waits)
	}
	a := s.Waits[0].Absent[0]
	if a.Rank != 2 || !a.NoDump || a.Last != 40 || !slices.Equal(a.Holds, []int64{7}) {
		t.Errorf("absent %+v, want rank 2, no dump, last #40, holding request 7", a)
	}
	for _, f := range s.Groups {
		if f.Group != "world" {
			continue
		}
		for _, p := range f.Members {
			if p.Rank == 2 && (!p.Inferred || p.Seq != 2) {
				t.Errorf("world position of rank 2 %+v, want at least #2 (its peers entered 3)", p)
			}
		}
	}
}

// A rank that kept no flight record (unchecked) is never read as a rank
// that did not arrive: nothing says where it was.
func TestAnalyzeUnrecordedRankIsNotAbsent(t *testing.T) {
	dumps := []*Dump{
		{Source: "rankrun", WorldRank: 0, WorldSize: 2, Groups: []Group{{Name: "g", Ranks: []int{0, 1}, Entered: 5}},
			Ops: []Op{{Group: "g", Seq: 5, Kind: "Allreduce", Peer: -1, StartNS: 7, Err: "timeout"}}},
		{Source: "rankrun", WorldRank: 1, WorldSize: 2, Unrecorded: true, Groups: []Group{{Name: "g", Ranks: []int{0, 1}}}},
	}
	s := Analyze(dumps)
	for _, w := range s.Waits {
		for _, a := range w.Absent {
			if a.Rank == 1 {
				t.Errorf("the unrecorded rank is named absent from %q #%d: %+v", w.Group, w.Seq, a)
			}
		}
	}
	if !slices.Equal(s.Unrecorded, []int{1}) {
		t.Errorf("unrecorded %v, want [1]", s.Unrecorded)
	}
	var b strings.Builder
	if err := s.WriteText(&b); err != nil || !strings.Contains(b.String(), "ranks [1] kept no flight record") || !strings.Contains(b.String(), " 1: unrecorded;") {
		t.Errorf("story %v:\n%s", err, b.String())
	}
}

// A rank's own collective timeout is what it knew when it failed: the
// story's wait comes from it, not from a frozen rank's later dump (mpirun
// wakes a stopped rank to end it, and it may go on into the next
// collective before it notices).
func TestAnalyzeTrustsTheTimeoutOverALaterDump(t *testing.T) {
	dumps := []*Dump{
		{Source: "rankrun", WorldRank: 1, WorldSize: 3, Groups: []Group{{Name: "gen", Ranks: []int{1, 2}, Entered: 10}},
			Timeout: &Timeout{Group: "gen", Seq: 10, Kind: "Allreduce", Missing: []int{2}},
			Ops:     []Op{{Group: "gen", Seq: 10, Kind: "Allreduce", Peer: -1, StartNS: 9, Err: "timeout"}}},
		// The frozen rank, woken: it entered #10 and #11 after its peer gave up.
		{Source: "rankrun", WorldRank: 2, WorldSize: 3, ErrorKind: "signal", Groups: []Group{{Name: "gen", Ranks: []int{1, 2}, Entered: 11}},
			Ops:      []Op{{Group: "gen", Seq: 10, Kind: "Allreduce", Peer: -1, StartNS: 20, EndNS: 21}, {Group: "gen", Seq: 11, Kind: "Allreduce", Peer: -1, StartNS: 22}},
			Sessions: []Session{{Request: 4, Role: "recv", Peers: []int{0}}}},
	}
	s := Analyze(dumps)
	if len(s.Waits) != 1 || s.Waits[0].Seq != 10 || !slices.Equal(s.Waits[0].Waiting, []int{1}) || len(s.Waits[0].Absent) != 1 {
		t.Fatalf("waits %+v, want rank 1 waiting in gen #10 with one absent", s.Waits)
	}
	if a := s.Waits[0].Absent[0]; a.Rank != 2 || a.NoDump || !a.Later || a.Last != 9 || !slices.Equal(a.Holds, []int64{4}) {
		t.Errorf("absent %+v, want rank 2 (with a later dump) last at #9, holding request 4", a)
	}

	// In-process every rank dumps when the run fails: the missing rank's
	// own records say where it was instead.
	dumps[1].ErrorKind = "cancelled"
	dumps[1].Groups[0].Entered = 9
	dumps[1].Ops = []Op{{Group: "gen", Seq: 9, Kind: "Allreduce", Peer: -1, StartNS: 5, EndNS: 6},
		{Group: "world", Kind: "Irecv", Peer: 0, Tag: 3, StartNS: 7}}
	s = Analyze(dumps)
	if a := s.Waits[0].Absent[0]; a.Later || a.Last != 9 || !strings.Contains(a.Doing, "Irecv peer 0 tag 3") {
		t.Errorf("absent %+v, want rank 2 last at #9, in its Irecv from rank 0", a)
	}
}

// A side's ranks that recorded a guard differently show every value.
func TestMergeGuards(t *testing.T) {
	got := mergeGuards([][]Guard{{{Name: "fits", Value: "1"}, {Name: "free", Value: "32"}, {Name: "busy", Value: "true"}},
		{{Name: "fits", Value: "1"}, {Name: "free", Value: "8"}, {Name: "busy", Value: "false"}}, {{Name: "free", Value: "0"}}, nil})
	if want := "fits=1 (on 2 of 4 ranks), free=0..32 (on 3 of 4 ranks), busy=false|true (on 2 of 4 ranks)"; guardsText(got) != want {
		t.Errorf("merged %q, want %s", guardsText(got), want)
	}
	// A name one rank's set holds twice counts that rank once.
	got = mergeGuards([][]Guard{{{Name: "fits", Value: "1"}, {Name: "fits", Value: "2"}}, {{Name: "free", Value: "3"}}})
	if want := "fits=1..2 (on 1 of 2 ranks), free=3 (on 1 of 2 ranks)"; guardsText(got) != want {
		t.Errorf("merged %q, want %s", guardsText(got), want)
	}
}

// A dump a rank left truncated (killed while writing it) is skipped and
// named, and the story is told from the other ranks' dumps, that rank
// counted as having none; whichever rank's file it is. ReadDir, strict,
// refuses the directory naming the file.
func TestReadDirSkippingTellsTheRest(t *testing.T) {
	for _, bad := range []int{0, 2, 3} {
		dir := t.TempDir()
		for r := range 4 {
			b, err := os.ReadFile(fmt.Sprintf("testdata/pytorch/mismatch/nccl_trace_rank_%d", r))
			if err != nil {
				t.Fatal(err)
			}
			if r == bad {
				b = b[:len(b)/2]
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("nccl_trace_rank_%d", r)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		file := filepath.Join(dir, fmt.Sprintf("nccl_trace_rank_%d", bad))
		dumps, unreadable, err := ReadDirSkipping(dir)
		if err != nil {
			t.Fatalf("rank %d truncated: %v", bad, err)
		}
		if len(dumps) != 3 || len(unreadable) != 1 || unreadable[0].File != file || !strings.Contains(unreadable[0].Why, "not a JSON dump: unexpected end of JSON input") {
			t.Fatalf("rank %d truncated: %d dumps, unreadable %+v", bad, len(dumps), unreadable)
		}
		s := Analyze(dumps)
		s.Unreadable = unreadable
		if !slices.Equal(s.NoDump, []int{bad}) {
			t.Errorf("rank %d truncated: no dump from %v", bad, s.NoDump)
		}
		var b bytes.Buffer
		if err := s.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if want := "not a dump, skipped: " + file + ": not a JSON dump: unexpected end of JSON input\n"; !strings.Contains(b.String(), want) {
			t.Errorf("rank %d truncated: the story does not say %q:\n%s", bad, want, b.String())
		}
		if _, err := ReadDir(dir); err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("rank %d truncated: ReadDir: %v, want an error naming %s", bad, err, file)
		}
	}
	// Nothing readable: an error naming the first file and why.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rank-00000.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := ReadDirSkipping(dir)
	if err == nil || !strings.Contains(err.Error(), "holds no readable dump") ||
		!strings.Contains(err.Error(), `no "format" field: not a rankrun dump (they begin {"format": "rankrun-dump/1", ...})`) {
		t.Errorf("a directory of one {} named rank-00000.json: %v", err)
	}
}

// What a dump says reaches the story's text with its control characters
// escaped: a crafted frame name, file name, kind or error cannot break a
// line or send the terminal an escape sequence.
func TestStoryEscapes(t *testing.T) {
	bad := "x\x1b[2J\r\nrank 9 failed (fake)\x07\u202e\xff"
	s := &Story{Source: "pytorch", Dumped: []int{0, 1}, NoDump: []int{}, Groups: []Front{},
		Errors:     []RankError{{Rank: 0, Kind: bad, First: bad}},
		Unreadable: []Unreadable{{File: "dir/" + bad, Why: bad}},
		Mismatch: &Mismatch{Group: "0", Seq: 1, Parted: bad, Sides: []Side{
			{Ranks: []int{0}, Kind: bad, Shape: bad, Site: "train.py:1 (" + bad + ")", Guards: []Guard{{Name: bad, Value: bad, Site: bad}}},
			{Ranks: []int{1}, Kind: "all_reduce", Site: bad}}},
		Waits: []Wait{{Group: "0", Seq: 2, Kind: bad, Site: bad, Waiting: []int{0}, Absent: []Absence{{Rank: 1, Last: 1, Doing: bad}}}},
	}
	var b bytes.Buffer
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, c := range []string{"\x1b", "\r", "\x07", "\u202e", "\xff", "\nrank 9"} {
		if strings.Contains(out, c) {
			t.Errorf("the story holds %q unescaped:\n%s", c, out)
		}
	}
	if want := `x\x1b[2J\r\nrank 9 failed (fake)\a\u202e\xff`; !strings.Contains(out, "at train.py:1 ("+want+")") {
		t.Errorf("the story does not hold the site escaped as %s:\n%s", want, out)
	}
}

// A rank with no dump, or an unreadable one, is listed, and the story
// says plainly that it is not by itself a finding (rankrun analyze's exit
// status 1): the story is told, and versions compared, from the readable
// dumps.
func TestStoryMissingIsNotAFinding(t *testing.T) {
	s := &Story{Source: "pytorch", Dumped: []int{0}, NoDump: []int{1}, Groups: []Front{},
		Unreadable: []Unreadable{{File: "d/nccl_trace_rank_1", Why: "pickle: at byte 9: truncated"}}}
	var b bytes.Buffer
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if want := "a missing or unreadable dump is listed, but is not by itself a hang or a mismatch"; !strings.Contains(b.String(), want) {
		t.Errorf("the story does not say %q:\n%s", want, b.String())
	}
	if s.Found() {
		t.Error("a missing dump alone is a finding")
	}
}
