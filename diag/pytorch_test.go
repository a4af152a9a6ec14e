package diag

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The call sites: the innermost frame that is not torch's own (each
// entry's stack begins in distributed_c10d.py, then c10d_logger.py).
const (
	missingSite    = "job/train.py:118 (train_step)"
	allReduceSite  = "job/train.py:126 (train_step)"
	allGatherSite  = "job/train.py:131 (train_step)"
	mismatchShape  = "in [1024] Float; out [1024] Float"
	allGatherShape = "in [1024] Float; out [1024] Float, [1024] Float, [1024] Float, [1024] Float"
)

func fixture(job string, rank int) string {
	return filepath.Join("testdata", "pytorch", job, "nccl_trace_rank_"+string(rune('0'+rank)))
}

func TestReadPyTorchMissing(t *testing.T) {
	world := []Group{{Name: "0", Ranks: []int{0, 1, 2, 3}}}
	for rank := 0; rank < 3; rank++ {
		path := fixture("missing", rank)
		d, err := ReadFile(path)
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		if d.Source != "pytorch" || d.Backend != "pytorch" || d.File != path {
			t.Errorf("rank %d: source %q backend %q file %q", rank, d.Source, d.Backend, d.File)
		}
		if d.WorldRank != rank || d.WorldSize != 4 {
			t.Errorf("rank %d: world rank %d size %d, want %d of 4", rank, d.WorldRank, d.WorldSize, rank)
		}
		if !reflect.DeepEqual(d.Groups, world) {
			t.Errorf("rank %d: groups %+v, want %+v", rank, d.Groups, world)
		}
		if len(d.Ops) != 5 {
			t.Fatalf("rank %d: %d ops, want 5", rank, len(d.Ops))
		}
		for i, op := range d.Ops {
			if op.Seq != uint64(i+1) || op.Group != "0" || op.Kind != "all_reduce" || op.Peer != -1 || op.P2P() {
				t.Errorf("rank %d op %d: %+v", rank, i, op)
			}
			if done := i < 4; op.InProgress() == done || (done && op.EndNS <= op.StartNS) {
				t.Errorf("rank %d op %d: start %d end %d, completed %v", rank, i, op.StartNS, op.EndNS, done)
			}
		}
		last := d.Ops[4]
		if last.Kind != "all_reduce" || last.Seq != 5 || !last.InProgress() || last.EndNS != 0 {
			t.Errorf("rank %d last op: %+v, want all_reduce seq 5 in progress", rank, last)
		}
		if last.Shape != "in [2048, 1024] BFloat16; out [2048, 1024] BFloat16" {
			t.Errorf("rank %d last shape %q", rank, last.Shape)
		}
		if last.Site != missingSite {
			t.Errorf("rank %d last site %q, want %q", rank, last.Site, missingSite)
		}
		// time_discovered_started_ns is set, so it is the start.
		if want := int64(1724779239000000000 + rank*137000 + 5*250_000_000 + 41_000); last.StartNS != want {
			t.Errorf("rank %d last start %d, want %d", rank, last.StartNS, want)
		}
	}
	if _, err := os.Stat(fixture("missing", 3)); !os.IsNotExist(err) {
		t.Errorf("missing/ has a dump for rank 3 (%v); rank 3 hung and wrote none", err)
	}
}

func TestReadPyTorchMismatch(t *testing.T) {
	for rank := 0; rank < 4; rank++ {
		d, err := ReadFile(fixture("mismatch", rank))
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		tp := Group{Name: "1", Ranks: []int{0, 1}}
		if rank >= 2 {
			tp = Group{Name: "2", Ranks: []int{2, 3}}
		}
		groups := []Group{{Name: "0", Ranks: []int{0, 1, 2, 3}}, tp}
		if d.WorldRank != rank || d.WorldSize != 4 || !reflect.DeepEqual(d.Groups, groups) {
			t.Errorf("rank %d: world rank %d size %d groups %+v, want %+v", rank, d.WorldRank, d.WorldSize, d.Groups, groups)
		}
		if len(d.Ops) != 7 {
			t.Fatalf("rank %d: %d ops, want 7", rank, len(d.Ops))
		}
		if d.Ops[0].Kind != "broadcast" || d.Ops[0].Shape != "in [4096, 1024] Float; out [4096, 1024] Float" {
			t.Errorf("rank %d first op %+v", rank, d.Ops[0])
		}
		for i, op := range d.Ops[:6] {
			if op.Seq != uint64(i+1) || op.InProgress() {
				t.Errorf("rank %d op %d: %+v, want seq %d completed", rank, i, op, i+1)
			}
		}
		last := d.Ops[6]
		kind, shape, site := "all_reduce", mismatchShape, allReduceSite
		if rank == 2 {
			kind, shape, site = "all_gather", allGatherShape, allGatherSite
		}
		if last.Kind != kind || last.Seq != 7 || last.Group != "0" || !last.InProgress() {
			t.Errorf("rank %d last op %+v, want %s seq 7 in progress", rank, last, kind)
		}
		if last.Shape != shape || last.Site != site {
			t.Errorf("rank %d last op shape %q site %q, want %q, %q", rank, last.Shape, last.Site, shape, site)
		}
	}
}

// A minimal valid dump, and the same with one part replaced.
const (
	ptEntry = `{"record_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1, "p2p_seq_id": 0,
  "profiling_name": "nccl:all_reduce", "time_created_ns": 100, "state": "scheduled",
  "time_discovered_started_ns": 0, "time_discovered_completed_ns": 0}`
	ptMinimal = `{"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": [0, 1]}},
 "entries": [` + ptEntry + `]}`
)

func TestReadPyTorchRanksAndP2P(t *testing.T) {
	// ranks as a list or a string; entries out of order; p2p peers.
	b := `{"pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[3, 1, 0, 2]"},
	  "5": {"name": "5", "desc": "pp", "ranks": [1, 3]}, "10": {"desc": "dp", "ranks": "[]"}},
	 "entries": [
	  {"record_id": 7, "process_group": ["5", "pp"], "collective_seq_id": 2, "p2p_seq_id": 4, "profiling_name": "nccl:recv 1<-0",
	   "is_p2p": true, "state": "completed", "time_created_ns": 50, "time_discovered_started_ns": null, "time_discovered_completed_ns": 90},
	  {"record_id": 6, "process_group": ["5", "pp"], "collective_seq_id": 2, "p2p_seq_id": 3, "profiling_name": "nccl:send 1->0",
	   "is_p2p": true, "state": "started", "time_created_ns": 40, "time_discovered_started_ns": 45, "time_discovered_completed_ns": 0},
	  {"record_id": 5, "process_group": ["0", "default_pg"], "collective_seq_id": 2, "profiling_name": "nccl:barrier",
	   "state": "completed", "time_created_ns": 30, "input_sizes": [[1]], "input_dtypes": ["Float"], "output_sizes": [], "output_dtypes": []},
	  {"record_id": 8, "process_group": ["5", "pp"], "collective_seq_id": 2, "profiling_name": "nccl:coalesced", "is_p2p": true,
	   "state": "scheduled", "time_created_ns": 60}]}`
	d, err := ReadPyTorch("/tmp/run/trace_rank_3.json", []byte(b))
	if err != nil {
		t.Fatal(err)
	}
	groups := []Group{{Name: "0", Ranks: []int{0, 1, 2, 3}}, {Name: "5", Ranks: []int{1, 3}}, {Name: "10", Ranks: []int{}}}
	if d.WorldRank != 3 || d.WorldSize != 4 || !reflect.DeepEqual(d.Groups, groups) {
		t.Errorf("rank %d size %d groups %+v, want 3 of 4, %+v", d.WorldRank, d.WorldSize, d.Groups, groups)
	}
	want := []Op{
		{Group: "0", Seq: 2, Kind: "barrier", Shape: "in [1] Float; out -", Peer: -1, StartNS: 30, EndNS: 30},
		{Group: "5", Kind: "send", Peer: 0, StartNS: 45},
		{Group: "5", Kind: "recv", Peer: 0, StartNS: 50, EndNS: 90},
		{Group: "5", Kind: "coalesced", Peer: -1, StartNS: 60},
	}
	if !reflect.DeepEqual(d.Ops, want) {
		t.Errorf("ops\n%+v\nwant\n%+v", d.Ops, want)
	}
	if !d.Ops[1].P2P() || !d.Ops[1].InProgress() || d.Ops[2].InProgress() || d.Ops[0].P2P() {
		t.Errorf("p2p/in-progress wrong: %+v", d.Ops)
	}
}

func TestReadPyTorchBad(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, file, body string
		want             []string // in the error besides the file
	}{
		{"not JSON", "nccl_trace_rank_0", "{pickle, not JSON", []string{"not a JSON dump"}},
		{"a pickle, not a dump", "nccl_trace_rank_0", "\x80\x04\x95 pickle, not JSON", []string{"pickle: at byte 11: byte 0x20 is not a pickle opcode"}},
		{"a pickled list", "nccl_trace_rank_0", "\x80\x02]q\x00.", []string{"top level: the pickle holds a list, not the dump's dict"}},
		{"top level a list", "nccl_trace_rank_0", `[1, 2]`, []string{"not a JSON dump"}},
		{"entries not a list", "nccl_trace_rank_0", `{"pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": [0, 1]}}, "entries": {"0": {"record_id": 0}}}`,
			[]string{"entries", "must be a list"}},
		{"no pg_config", "nccl_trace_rank_0", `{"version": "2.10", "entries": []}`, []string{"pg_config", "missing"}},
		{"rank not derivable", "trace.json", ptMinimal, []string{"file name", "nccl_trace_rank_3"}},
		{"rank not in default pg", "nccl_trace_rank_9", ptMinimal, []string{"file name", "rank 9", "default_pg"}},
		{"pg ranks not a list", "nccl_trace_rank_0", strings.Replace(ptMinimal, `"ranks": [0, 1]`, `"ranks": 2`, 1),
			[]string{`pg_config["0"].ranks`, "list"}},
		{"pg ranks string not a list", "nccl_trace_rank_0", strings.Replace(ptMinimal, `"ranks": [0, 1]`, `"ranks": "0-1"`, 1),
			[]string{`pg_config["0"].ranks`, "list"}},
		{"pg ranks negative", "nccl_trace_rank_0", strings.Replace(ptMinimal, `"ranks": [0, 1]`, `"ranks": "[0, -1]"`, 1),
			[]string{`pg_config["0"].ranks`, "non-negative"}},
		{"seq a string", "nccl_trace_rank_0", strings.Replace(ptMinimal, `"collective_seq_id": 1`, `"collective_seq_id": "1"`, 1),
			[]string{"entries[0].collective_seq_id", "integer"}},
		{"process_group a string", "nccl_trace_rank_0", strings.Replace(ptMinimal, `["0", "default_pg"]`, `"0"`, 1),
			[]string{"entries[0].process_group", "[name, desc]"}},
		{"bad state", "nccl_trace_rank_0", strings.Replace(ptMinimal, `"scheduled"`, `"running"`, 1),
			[]string{"entries[0].state", "running"}},
		{"no profiling name", "nccl_trace_rank_0", strings.Replace(ptMinimal, `"profiling_name": "nccl:all_reduce",`, ``, 1),
			[]string{"entries[0].profiling_name", "missing"}},
		{"dtypes short", "nccl_trace_rank_0", strings.Replace(ptMinimal, `"state"`, `"input_sizes": [[4], [4]], "input_dtypes": ["Float"], "state"`, 1),
			[]string{"entries[0].input_dtypes", "2 tensors"}},
		{"frames not a list", "nccl_trace_rank_0", strings.Replace(ptMinimal, `"state"`, `"frames": {"name": "f"}, "state"`, 1),
			[]string{"entries[0].frames", "list"}},
		{"duplicate record id", "nccl_trace_rank_0", strings.Replace(ptMinimal, ptEntry, ptEntry+", "+ptEntry, 1),
			[]string{"entries[1].record_id", "unique"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.file)
			if err := os.WriteFile(path, []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := ReadFile(path)
			if err == nil {
				t.Fatalf("read %+v, want an error", d)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error is more than one line: %q", msg)
			}
			for _, w := range append([]string{path}, c.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
	// ReadPyTorch itself, past ReadFile's JSON check.
	if _, err := ReadPyTorch("x/nccl_trace_rank_0", []byte("not json")); err == nil || !strings.Contains(err.Error(), "x/nccl_trace_rank_0") {
		t.Errorf("not JSON: %v", err)
	}
	if _, err := ReadPyTorch("x/nccl_trace_rank_0", []byte("null")); err == nil || !strings.Contains(err.Error(), "top level") {
		t.Errorf("null: %v", err)
	}
}

func FuzzReadPyTorch(f *testing.F) {
	for _, job := range []string{"missing", "mismatch"} {
		files, err := filepath.Glob(filepath.Join("testdata", "pytorch", job, "nccl_trace_rank_*"))
		if err != nil || len(files) == 0 {
			f.Fatalf("no fixtures for %s (%v)", job, err)
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(filepath.Base(p), b)
		}
	}
	f.Add("nccl_trace_rank_1", []byte(ptMinimal))
	f.Add("trace", []byte(`{"entries": [], "pg_config": {}}`))
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		d, err := ReadPyTorch(name, b)
		if err != nil {
			if d != nil {
				t.Fatalf("error %v with a dump", err)
			}
			return
		}
		if d == nil || d.WorldRank < 0 {
			t.Fatalf("success with dump %+v", d)
		}
	})
}

// The jobs the test writer pickles as PyTorch does (pickle_write_test.go).
var (
	// 4 ranks; rank 2 is stuck in all_reduce #5, which the others passed:
	// they wait in #6.
	jobStuck = frJobSpec{world: 4, groups: func(int) []frGroup { return []frGroup{worldGroup(4)} },
		entries: func(r int) []frEntry {
			if r == 2 {
				return allReduces(worldGroup(4), r, 5, "started")
			}
			return allReduces(worldGroup(4), r, 6, "started")
		}}
	// 4 ranks; rank 3 left no dump: the others wait in all_reduce #6.
	jobMissing = frJobSpec{world: 4, skip: map[int]bool{3: true}, groups: func(int) []frGroup { return []frGroup{worldGroup(4)} },
		entries: func(r int) []frEntry { return allReduces(worldGroup(4), r, 6, "started") }}
	// 4 ranks; at all_reduce #4 rank 1's tensor is [1024, 1024], the
	// others' [2048, 1024].
	jobSizes = frJobSpec{world: 4, groups: func(int) []frGroup { return []frGroup{worldGroup(4)} },
		entries: func(r int) []frEntry {
			es := allReduces(worldGroup(4), r, 4, "started")
			if r == 1 {
				es[3].in, es[3].out = [][]int64{{1024, 1024}}, [][]int64{{1024, 1024}}
			}
			return es
		}}
	// 4 ranks in TP pairs: a broadcast, an all_reduce on each pair, an
	// all_reduce; then at #3 rank 3 enters all_gather (from another line)
	// where the others enter all_reduce.
	jobOps = frJobSpec{world: 4, groups: func(r int) []frGroup { return []frGroup{worldGroup(4), tpPair(r)} },
		entries: func(r int) []frEntry {
			w, t0 := worldGroup(4), int64(1731402113000000000)+int64(r)*91_000
			one := [][]int64{{1024}}
			es := []frEntry{
				{group: w, seq: 1, op: "broadcast", in: [][]int64{{4096, 1024}}, out: [][]int64{{4096, 1024}}, dtype: "Float", state: "completed", created: t0, frames: frStack("broadcast", jobMain)},
				{group: tpPair(r), seq: 1, op: "all_reduce", in: one, out: one, dtype: "Float", state: "completed", created: t0 + 1e8, frames: frStack("all_reduce", jobForward, jobTrain, jobMain)},
				{group: w, seq: 2, op: "all_reduce", in: one, out: one, dtype: "Float", state: "completed", created: t0 + 2e8, frames: frStack("all_reduce", jobTrain, jobMain)},
				{group: w, seq: 3, op: "all_reduce", in: one, out: one, dtype: "Float", state: "started", created: t0 + 3e8, frames: frStack("all_reduce", jobTrain, jobMain)},
			}
			if r == 3 {
				es[3].op, es[3].out, es[3].frames = "all_gather", [][]int64{{1024}, {1024}, {1024}, {1024}}, frStack("all_gather", jobGather, jobMain)
			}
			return es
		}}
	// 64 ranks, TP groups of 8: each rank's TP group ran 3 all_reduces;
	// rank 45 left no dump, and the 63 others wait in the world's #8.
	job64 = frJobSpec{world: 64, skip: map[int]bool{45: true},
		groups: func(r int) []frGroup { return []frGroup{worldGroup(64), tpGroup(r)} },
		entries: func(r int) []frEntry {
			es := allReduces(tpGroup(r), r, 3, "completed")
			return append(es, allReduces(worldGroup(64), r, 8, "started")...)
		}}
	// 4 ranks, every collective completed: nothing to find.
	jobClean = frJobSpec{world: 4, groups: func(int) []frGroup { return []frGroup{worldGroup(4)} },
		entries: func(r int) []frEntry { return allReduces(worldGroup(4), r, 3, "completed") }}
)

func tpPair(r int) frGroup {
	if r < 2 {
		return frGroup{name: "1", desc: "tp", ranks: []int{0, 1}}
	}
	return frGroup{name: "2", desc: "tp", ranks: []int{2, 3}}
}

func tpGroup(r int) frGroup {
	g := frGroup{name: strconv.Itoa(r/8 + 1), desc: "tp"}
	for m := r / 8 * 8; m < r/8*8+8; m++ {
		g.ranks = append(g.ranks, m)
	}
	return g
}

// story analyses a directory's dumps and tells the story as text.
func story(t *testing.T, dir string) (*Story, string) {
	t.Helper()
	s := Analyze(readDir(t, dir))
	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return s, b.String()
}

// siteText matches " at dir/file.py:line (function)" in a story: dump_json
// leaves the stack frames out, so its story names no site.
var siteText = regexp.MustCompile(` at [^ ;()]+:\d+ \([^)]*\)`)

// Each job pickled as PyTorch writes it: analyze names the rank that never
// arrived (stuck elsewhere, or with no dump) and both sides of each
// mismatch, each side's call site the job's own line, never torch's; the
// pickle re-saved as JSON tells the same story, dump_json's JSON the same
// without the sites it leaves out.
func TestAnalyzePickledJobs(t *testing.T) {
	for _, c := range []struct {
		name  string
		job   frJobSpec
		found bool
		want  []string // in the pickled dumps' story
		check func(t *testing.T, s *Story)
	}{
		{"stuck", jobStuck, true, []string{
			`ranks [0 1 3] wait in "0" #6 (all_reduce at job/train.py:126 (train_step)); never arrived:`,
			`  rank 2: its last collective there is #5; it is in all_reduce #5 on "0" at job/train.py:126 (train_step)`,
		}, func(t *testing.T, s *Story) {
			if len(s.Waits) != 1 || len(s.Waits[0].Absent) != 1 || s.Waits[0].Absent[0].Rank != 2 || s.Waits[0].Absent[0].NoDump {
				t.Errorf("waits %+v, want rank 2 (dumped) absent from #6", s.Waits)
			}
		}},
		{"missing", jobMissing, true, []string{
			"dumps from world ranks [0 1 2]; no dump from world ranks [3]",
			`ranks [0 1 2] wait in "0" #6 (all_reduce at job/train.py:126 (train_step)); never arrived:`,
			"  rank 3 (no dump: frozen, killed, or it could not write): its last collective there is #5",
		}, func(t *testing.T, s *Story) {
			if !slices.Equal(s.NoDump, []int{3}) {
				t.Errorf("no dump %v, want [3]", s.NoDump)
			}
		}},
		{"size mismatch", jobSizes, true, []string{
			`first mismatch: "0" #4 was entered differently:`,
			"  ranks [0 2 3] entered all_reduce (in [2048, 1024] BFloat16; out [2048, 1024] BFloat16) at job/train.py:126 (train_step)",
			"  ranks [1] entered all_reduce (in [1024, 1024] BFloat16; out [1024, 1024] BFloat16) at job/train.py:126 (train_step)",
		}, nil},
		{"op mismatch", jobOps, true, []string{
			`first mismatch: "0" #3 was entered differently:`,
			"  ranks [0 1 2] entered all_reduce (in [1024] Float; out [1024] Float) at job/train.py:126 (train_step)",
			"  ranks [3] entered all_gather (in [1024] Float; out [1024] Float, [1024] Float, [1024] Float, [1024] Float) at job/train.py:131 (train_step)",
			`"1" (world ranks [0 1]): 0:#1 done; 1:#1 done;`,
		}, nil},
		{"64 ranks", job64, true, []string{
			"job: 63 dumps (pytorch) of a world of 64 ranks;",
			"no dump from world ranks [45]",
			`wait in "0" #8 (all_reduce at job/train.py:126 (train_step)); never arrived:`,
			"  rank 45 (no dump: frozen, killed, or it could not write): its last collective there is #7",
		}, func(t *testing.T, s *Story) {
			if len(s.Waits) != 1 || len(s.Waits[0].Waiting) != 63 || len(s.Waits[0].Absent) != 1 || s.Waits[0].Absent[0].Rank != 45 {
				t.Errorf("waits %+v, want 63 ranks waiting for rank 45", s.Waits)
			}
		}},
		{"clean", jobClean, false, []string{`"0" (world ranks [0 1 2 3]): 0:#3 done; 1:#3 done; 2:#3 done; 3:#3 done;`}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			pickled, resaved, dumpJSON := writeJob(t, c.job.ranks())
			s, text := story(t, pickled)
			if s.Found() != c.found {
				t.Errorf("found %v, want %v:\n%s", s.Found(), c.found, text)
			}
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("the story lacks %q:\n%s", w, text)
				}
			}
			if strings.Contains(text, "distributed_c10d") || strings.Contains(text, "c10d_logger") || len(s.Versions) != 0 {
				t.Errorf("the story names torch's own frame, or versions %v:\n%s", s.Versions, text)
			}
			if c.check != nil {
				c.check(t, s)
			}
			if _, again := story(t, resaved); again != text {
				t.Errorf("the pickle re-saved as JSON tells\n%s\nthe pickle tells\n%s", again, text)
			}
			if _, fromJSON := story(t, dumpJSON); fromJSON != siteText.ReplaceAllString(text, "") {
				t.Errorf("dump_json's JSON tells\n%s\nthe pickle, sites left out, tells\n%s", fromJSON, siteText.ReplaceAllString(text, ""))
			}
		})
	}
}

// Ranks whose dumps give different format versions (two PyTorch builds
// in one job): the story says which ranks wrote which, in one line, and
// that is a finding.
func TestAnalyzeVersionsDisagree(t *testing.T) {
	job := jobClean
	job.version = func(r int) string {
		if r == 2 {
			return "2.9"
		}
		return "2.10"
	}
	pickled, _, _ := writeJob(t, job.ranks())
	s, text := story(t, pickled)
	want := []VersionRanks{{"2.10", []int{0, 1, 3}}, {"2.9", []int{2}}}
	if !reflect.DeepEqual(s.Versions, want) || !s.Found() {
		t.Errorf("versions %+v (found %v), want %+v", s.Versions, s.Found(), want)
	}
	line := `the dumps' format versions disagree (ranks that ran different builds): ranks [0 1 3] wrote version "2.10"; ranks [2] wrote version "2.9"` + "\n"
	if !strings.Contains(text, line) {
		t.Errorf("the story lacks %q:\n%s", line, text)
	}
	d, err := ReadFile(filepath.Join(pickled, "nccl_trace_rank_2"))
	if err != nil || d.Version != "2.9" {
		t.Errorf("rank 2's dump: version %q, %v", d.Version, err)
	}
}

// The fixtures Python's own pickle module wrote (gen_pickle.py) at
// protocols 2 and 5: a 3-rank job whose rank 2 entered all_reduce #3 with
// another size. Both tell one story, the JSON the test writer's pickles
// are read as.
func TestAnalyzePythonPickles(t *testing.T) {
	s, text := story(t, "testdata/pytorch/pickle-py2")
	for _, w := range []string{
		"job: 3 dumps (pytorch) of a world of 3 ranks; dumps from world ranks [0 1 2]\n",
		`first mismatch: "0" #3 was entered differently:`,
		"  ranks [0 1] entered all_reduce (in [4096, 1024] BFloat16; out [4096, 1024] BFloat16) at model/layers.py:88 (forward)\n",
		"  ranks [2] entered all_reduce (in [4096, 512] BFloat16; out [4096, 512] BFloat16) at model/layers.py:88 (forward)\n",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("the story lacks %q:\n%s", w, text)
		}
	}
	if !s.Found() {
		t.Errorf("a mismatch, not found")
	}
	if _, p5 := story(t, "testdata/pytorch/pickle-py5"); p5 != text {
		t.Errorf("protocol 5 tells\n%s\nprotocol 2 tells\n%s", p5, text)
	}
	d, err := ReadFile("testdata/pytorch/pickle-py2/nccl_trace_rank_2")
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != "2.10" || d.WorldRank != 2 || d.WorldSize != 3 || len(d.Ops) != 3 {
		t.Fatalf("rank 2: %+v", d)
	}
	first := Op{Group: "0", Seq: 1, Kind: "broadcast", Shape: "in [256] Float; out [256] Float", Site: "job/train.py:30 (setup)", Peer: -1,
		StartNS: 1731402113250000000 + 2*91_000 + 52_000, EndNS: 1731402113250000000 + 2*91_000 + 907_000}
	if !reflect.DeepEqual(d.Ops[0], first) {
		t.Errorf("rank 2's first op\n%+v, want\n%+v", d.Ops[0], first)
	}
	if last := d.Ops[2]; !last.InProgress() || last.Site != "model/layers.py:88 (forward)" {
		t.Errorf("rank 2's last op %+v, want in progress at model/layers.py:88", last)
	}
}

// The call site is the innermost Python frame that is not torch's own
// (distributed_c10d.py, the installed torch package, torch/distributed/,
// a path relative to torch's root), past any C++ frames; with none, the
// innermost frame outside a torch/ directory with a file; none left, no
// site.
func TestPyTorchSite(t *testing.T) {
	for _, c := range []struct {
		frames string
		want   string
	}{
		{`[{"name": "all_reduce", "filename": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 1},
		   {"name": "wrapper", "filename": "/x/site-packages/torch/distributed/c10d_logger.py", "line": 2},
		   {"name": "step", "filename": "/w/job/train.py", "line": 3}]`, "job/train.py:3 (step)"},
		{`[{"name": "c10d::allreduce", "filename": "", "line": 0},
		   {"name": "all_reduce", "filename": "distributed_c10d.py", "line": 1},
		   {"name": "fwd", "filename": "C:\\w\\model.py", "line": 9}]`, "w/model.py:9 (fwd)"},
		{`[{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 1}]`, ""},
		{`[]`, ""},
		// TORCH_NCCL_TRACE_CPP_STACK: C++ frames innermost, then Python;
		// the site is the user's Python line.
		{`[{"name": "c10d::ProcessGroupNCCL::allreduce", "filename": "aten/src/ATen/core/dispatch/Dispatcher.h", "line": 10},
		   {"name": "c10::impl::call", "filename": "c10/core/impl/Op.cpp", "line": 11},
		   {"name": "??", "filename": "??", "line": 0},
		   {"name": "__libc_start_main", "filename": "/usr/lib/x86_64-linux-gnu/libc.so.6", "line": 0},
		   {"name": "_PyEval_EvalFrameDefault", "filename": "/usr/local/src/Python-3.12/Python/ceval.c", "line": 4},
		   {"name": "all_reduce", "filename": "/x/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", "line": 1},
		   {"name": "step", "filename": "/w/job/train.py", "line": 3}]`, "job/train.py:3 (step)"},
		// torch's own Python frames: installed, relative, or its
		// distributed package in a source checkout; then a user's
		// directory that happens to be named torch.
		{`[{"name": "forward", "filename": "/x/dist-packages/torch/nn/parallel/distributed.py", "line": 2},
		   {"name": "forward", "filename": "torch/nn/modules/module.py", "line": 3},
		   {"name": "wrapper", "filename": "/src/pytorch/torch/distributed/c10d_logger.py", "line": 4},
		   {"name": "main", "filename": "/home/u/torch/train.py", "line": 5}]`, "torch/train.py:5 (main)"},
		// No Python frame of the user's: the innermost frame outside
		// torch/, of whatever language, as before.
		{`[{"name": "at::foo", "filename": "aten/src/ATen/Foo.cpp", "line": 7},
		   {"name": "all_reduce", "filename": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 1}]`, "ATen/Foo.cpp:7 (at::foo)"},
	} {
		b := strings.Replace(ptMinimal, `"state"`, `"frames": `+c.frames+`, "state"`, 1)
		d, err := ReadPyTorch("nccl_trace_rank_0", []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		if d.Ops[0].Site != c.want {
			t.Errorf("frames %s: site %q, want %q", c.frames, d.Ops[0].Site, c.want)
		}
	}
}
