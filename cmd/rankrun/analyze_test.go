package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rankrun/rankrun/diag"
)

// Each replay that splits the ranks, run with --dump-dir: every rank
// writes its dump, the error says where they are, and rankrun analyze
// names the first mismatch with the guard value that differed on each
// side. In simulation (one seed, one run) and in-process.
func TestAnalyzeNamesTheGuardOnEachSide(t *testing.T) {
	cases := []struct {
		name, backend string
		args          []string
		want          []string
		differ        string // the guard whose value differs between the two sides
	}{
		{"local-admission-gate", "sim", []string{"--ctx", "tp=2", "--gen", "tp=2", "--requests", "24", "--input", "64", "--output", "2", "--arrival", "closed=8",
			"--ctx-blocks", "64", "--gen-blocks", "64", "--fault", "shrink-pool@ctx:1,blocks=8", "--replay", "local-admission-gate"},
			[]string{"first mismatch", "fits=0", "sends_held=true", "their call paths part at executor/ctx.go"}, "waiting"},
		{"local-error-collective", "local", []string{"--ctx", "tp=1", "--gen", "tp=2", "--requests", "16", "--input", "64", "--output", "2", "--arrival", "closed=4",
			"--fault", "fail-transfer@gen:1,req=3", "--replay", "local-error-collective"},
			[]string{"first mismatch", "ranks [1] entered Allgather", "new_local_failures=0", "ranks [2] entered Allreduce", "new_local_failures=1"}, "new_local_failures"},
		{"unsafe-idle-reap", "sim", []string{"--ctx", "tp=1", "--gen", "dp=2,adp", "--transfer", "sync", "--requests", "8", "--input", "64", "--output", "2",
			"--arrival", "closed=1", "--replay", "unsafe-idle-reap"},
			[]string{"first mismatch", "busy_locally=false", "busy_locally=true"}, "busy_locally"},
	}
	for _, c := range cases {
		t.Run(c.name+"/"+c.backend, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "dumps")
			args := append([]string{"run", "--backend", c.backend, "--collective-timeout", "5s", "--dump-dir", dir}, c.args...)
			code, _, stderr := cli(t, args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1 (the replay's failure); stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr, "failure dumps (one per rank that could write one) are in "+dir+": rankrun analyze "+dir) {
				t.Errorf("stderr does not say where the dumps are:\n%s", stderr)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "rank-*.json"))
			if len(files) < 2 {
				t.Fatalf("dumps %v, want one per failed rank", files)
			}
			code, story, serr := cli(t, "analyze", dir)
			if code != 1 {
				t.Fatalf("analyze exit %d, want 1 (a mismatch): %s", code, serr)
			}
			for _, w := range c.want {
				if !strings.Contains(story, w) {
					t.Errorf("the story lacks %q:\n%s", w, story)
				}
			}
			code, js, _ := cli(t, "analyze", "--json", dir)
			var s diag.Story
			if err := json.Unmarshal([]byte(js), &s); code != 1 || err != nil || s.Mismatch == nil || len(s.Mismatch.Sides) < 2 {
				t.Fatalf("analyze --json: exit %d, %v, mismatch %+v", code, err, s.Mismatch)
			}
			value := func(sd diag.Side) string {
				for _, g := range sd.Guards {
					if g.Name == c.differ {
						return g.Value
					}
				}
				return "(none)"
			}
			if a, b := value(s.Mismatch.Sides[0]), value(s.Mismatch.Sides[1]); a == b || a == "(none)" || b == "(none)" {
				t.Errorf("%s is %s on one side and %s on the other: want it named on both, with different values", c.differ, a, b)
			}
		})
	}
}

// A rank that exits (an injected fault) and one that stalls leave dumps
// whose story names the failure, the pool and the sessions (analyze exits
// 1 only where it names a hang or a mismatch); --trace writes the last
// moments as a Chrome trace. An unchecked run's dumps keep no
// flight record, and the story says so instead of showing no collective.
func TestDumpsOfOtherFailures(t *testing.T) {
	cases := []struct {
		name string
		args []string
		kind string
		code int // analyze's: 1 when the story names a hang or a mismatch
		want []string
	}{
		{"injected exit", []string{"--fault", "exit@gen:1,req=3"}, "injected", 0, []string{"rank 2 failed (injected)", "requests still held", "timeline: 0.000 ms arrived (ranks [1 2 3 4])", "sending session opened (peers [1 2 3 4]) (ranks [0])"}},
		// In simulation: in-process the 1 s timeout is wall time, and a
		// loaded host (mutate's baseline beside two busy loops) timed out a
		// starved rank before the stall (in-process dumps: TestAnalyzeNamesTheGuardOnEachSide).
		{"collective timeout", []string{"--ctx", "tp=2", "--gen", "tp=2", "--requests", "12", "--input", "64", "--output", "2",
			"--collective-timeout", "1s", "--fault", "stall@gen:1,req=3,for=30s"}, "collective-timeout", 1,
			[]string{`ranks [2] wait in "world/s1c2/s0c0"`, "never arrived:\n  rank 3: its last collective there is #", "requests in flight with it"}},
		{"stall (seed 001)", []string{"--transfer", "sync", "--replay", "no-idle-reap", "--ctx-blocks", "16", "--requests", "24", "--input", "64", "--output", "2",
			"--arrival", "closed=8", "--stall-timeout", "1s"}, "stalled", 0, []string{"rank 0 failed (stalled)", "sends_held=true"}},
		{"unchecked desync", []string{"--unchecked", "--ctx", "tp=1", "--gen", "tp=2", "--requests", "16", "--input", "64", "--output", "2", "--arrival", "closed=4",
			"--fault", "fail-transfer@gen:1,req=3", "--replay", "local-error-collective"}, "desync", 0,
			[]string{"ranks [0 1 2] kept no flight record: they ran unchecked", `"world/s1c2" (world ranks [1 2]): 1: unrecorded; 2: unrecorded;`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			args := append([]string{"run", "--backend", "sim", "--dump-dir", dir}, c.args...)
			if code, _, stderr := cli(t, args...); code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
			}
			dumps, err := diag.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			decided := 0
			for _, d := range dumps {
				kinds[d.ErrorKind] = true
				decided += len(d.Iterations)
				if len(d.Pools) != 1 || d.Pools[0].Total == 0 || len(d.Groups) == 0 {
					t.Errorf("rank %d's dump lacks its pool or groups: %+v %+v", d.WorldRank, d.Pools, d.Groups)
				}
				if d.WorldRank == 0 && !strings.Contains(d.Stacks, "goroutine ") {
					t.Errorf("world rank 0's dump has no goroutine stacks")
				}
			}
			if decided == 0 {
				t.Errorf("no dump lists a decision")
			}
			if !kinds[c.kind] {
				t.Errorf("dump error kinds %v, want %s among them", kinds, c.kind)
			}
			tr := filepath.Join(t.TempDir(), "t.json")
			code, story, serr := cli(t, "analyze", "--trace", tr, dir)
			if code != c.code {
				t.Fatalf("analyze exit %d, want %d: %s\n%s", code, c.code, serr, story)
			}
			for _, w := range c.want {
				if !strings.Contains(story, w) {
					t.Errorf("the story lacks %q:\n%s", w, story)
				}
			}
			b, err := os.ReadFile(tr)
			var trace struct {
				TraceEvents []map[string]any `json:"traceEvents"`
			}
			if err != nil || json.Unmarshal(b, &trace) != nil || len(trace.TraceEvents) < len(dumps) {
				t.Errorf("trace %s: %v, %d events", tr, err, len(trace.TraceEvents))
			}
		})
	}
}

// Bad input to analyze is one line naming the rule.
func TestAnalyzeBadInput(t *testing.T) {
	empty := t.TempDir()
	junk := t.TempDir()
	if err := os.WriteFile(filepath.Join(junk, "rank-00000.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	mixed := t.TempDir()
	for i, job := range []string{"a", "b"} {
		b := fmt.Sprintf(`{"format": "rankrun-dump/1", "job": %q, "world_rank": %d, "world_size": 2}`, job, i)
		if err := os.WriteFile(filepath.Join(mixed, diag.FileName(i)), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	huge := t.TempDir()
	if err := os.WriteFile(filepath.Join(huge, "rank-00000.json"), []byte(`{"format": "rankrun-dump/1", "world_rank": 0, "world_size": 1000000000000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"analyze", mixed}, "holds dumps of more than one job"},
		{[]string{"analyze", huge}, "world_size 1000000000000: must be in 0..1048576"},
		{[]string{"run", "--dump-dir", mixed}, "holds dumps of an earlier job (rank-00000.json)"},
		{[]string{"analyze"}, "want one directory of dumps"},
		{[]string{"analyze", empty}, "holds no dump"},
		{[]string{"analyze", junk}, "not a JSON dump"},
		{[]string{"analyze", filepath.Join(empty, "nope")}, "no such file"},
		{[]string{"analyze", "analyze.go"}, "analyze: analyze.go is a file: want the directory of dumps (rankrun run --dump-dir DIR)"},
	} {
		code, _, stderr := cli(t, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q, want one line with %q", c.args, code, stderr, c.want)
		}
	}
}

// A dump left truncated (its rank killed while writing it) is named and
// skipped; the story comes from the others, that rank counted as having
// no dump.
func TestAnalyzeSkipsATruncatedDump(t *testing.T) {
	dir := t.TempDir()
	for r := range 4 {
		b, err := os.ReadFile(fmt.Sprintf("../../diag/testdata/pytorch/mismatch/nccl_trace_rank_%d", r))
		if err != nil {
			t.Fatal(err)
		}
		if r == 1 {
			b = b[:len(b)/3]
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("nccl_trace_rank_%d", r)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, story, stderr := cli(t, "analyze", dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (ranks 0, 2 and 3 still show the mismatch): %s", code, stderr)
	}
	for _, want := range []string{"dumps from world ranks [0 2 3]; no dump from world ranks [1]",
		"not a dump, skipped: " + filepath.Join(dir, "nccl_trace_rank_1") + ": not a JSON dump: unexpected end of JSON input"} {
		if !strings.Contains(story, want) {
			t.Errorf("the story does not say %q:\n%s", want, story)
		}
	}
}

// analyze's exit status, for a CI job: 0 when the story names no hang and
// no mismatch, 1 when it names one (in PyTorch's pickled dumps as PyTorch
// writes them, or in JSON dumps), 2 when there is no story to tell, with
// one line saying why; -h documents them.
func TestAnalyzeExitStatus(t *testing.T) {
	pickles := filepath.Join(repoRoot, "diag/testdata/pytorch/pickle-py2")
	clean := t.TempDir()
	for r := range 2 {
		b := fmt.Sprintf(`{"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}, "entries": [
 {"record_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1, "p2p_seq_id": 0, "profiling_name": "nccl:all_reduce",
  "time_created_ns": %d, "state": "completed", "time_discovered_started_ns": 0, "time_discovered_completed_ns": 0}]}`, 100+r)
		if err := os.WriteFile(filepath.Join(clean, fmt.Sprintf("nccl_trace_rank_%d", r)), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Ranks 0 and 1 of the pickled job, and rank 2's dump cut short: the
	// two wait in all_reduce #3 for rank 2, which left no readable dump.
	partial, truncated := t.TempDir(), t.TempDir()
	for r := range 3 {
		b, err := os.ReadFile(filepath.Join(pickles, fmt.Sprintf("nccl_trace_rank_%d", r)))
		if err != nil {
			t.Fatal(err)
		}
		if r == 2 {
			b = b[:len(b)/2]
			if err := os.WriteFile(filepath.Join(truncated, "nccl_trace_rank_2"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(partial, fmt.Sprintf("nccl_trace_rank_%d", r)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string // in stdout (0, 1) or the one line on stderr (2)
	}{
		{[]string{clean}, 0, "dumps from world ranks [0 1]\n"},
		{[]string{"--json", clean}, 0, `"dumped": [`},
		{[]string{pickles}, 1, "  ranks [2] entered all_reduce (in [4096, 512] BFloat16; out [4096, 512] BFloat16) at model/layers.py:88 (forward)\n"},
		{[]string{"--json", pickles}, 1, `"mismatch": {`},
		{[]string{filepath.Join(repoRoot, "diag/testdata/pytorch/missing")}, 1, "no dump from world ranks [3]"},
		{[]string{partial}, 1, "not a dump, skipped: " + filepath.Join(partial, "nccl_trace_rank_2") + ": pickle: at byte "},
		{[]string{truncated}, 2, "holds no readable dump (" + filepath.Join(truncated, "nccl_trace_rank_2") + ": pickle: at byte "},
		{[]string{t.TempDir()}, 2, "holds no dump"},
		{[]string{filepath.Join(clean, "nope")}, 2, "no such file or directory"},
		{[]string{"--bogus", clean}, 2, "flag provided but not defined: -bogus"},
	} {
		code, stdout, stderr := cli(t, append([]string{"analyze"}, c.args...)...)
		out := stdout
		if c.code == 2 {
			out = stderr
			if strings.Count(strings.TrimSpace(stderr), "\n") > 0 || stdout != "" {
				t.Errorf("%v: stdout %q, stderr %q: want one line on stderr", c.args, stdout, stderr)
			}
		}
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, want %d, with %q in:\n%s%s", c.args, code, c.code, c.want, stdout, stderr)
		}
	}
	code, _, help := cli(t, "analyze", "-h")
	for _, w := range []string{"the pickle PyTorch writes, dump_json's JSON, or the pickle re-saved as JSON",
		"Exit status: 0 the story names no hang and no mismatch; 1 it names a hang", "2 no story: DIR holds no readable dump"} {
		if code != 0 || !strings.Contains(help, w) {
			t.Errorf("analyze -h (exit %d) lacks %q:\n%s", code, w, help)
		}
	}
}
