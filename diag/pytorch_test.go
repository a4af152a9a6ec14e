package diag

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	allReduceSite  = "distributed/distributed_c10d.py:2806 (all_reduce)"
	allGatherSite  = "distributed/distributed_c10d.py:3658 (all_gather)"
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
		if last.Site != allReduceSite {
			t.Errorf("rank %d last site %q, want %q", rank, last.Site, allReduceSite)
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
		{"not JSON", "nccl_trace_rank_0", "\x80\x04\x95 pickle, not JSON", []string{"not a JSON dump"}},
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
