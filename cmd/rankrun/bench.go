package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

const benchExamples = `  make bench                                    # everything: scripts/bench.sh runs the parts, then this
  rankrun bench --raw out/raw --json out/bench.json --md BENCHMARKS.md
  rankrun bench --raw '' --json /dev/null       # only the in-process executor figures
`

// benchRow is one figure next to its reference. Ratio is Value/RefValue
// unless the row says otherwise (Note).
type benchRow struct {
	Section   string   `json:"section"`
	Figure    string   `json:"figure"`
	Value     float64  `json:"value"`
	Unit      string   `json:"unit"`
	Reference string   `json:"reference"`
	RefValue  float64  `json:"reference_value"`
	Ratio     float64  `json:"ratio"`
	Goal      string   `json:"goal,omitempty"`
	Met       *bool    `json:"meets_goal,omitempty"`
	Allocs    *float64 `json:"allocs_per_op,omitempty"`
	Note      string   `json:"note,omitempty"`
}

type benchMachine struct {
	CPUs      int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	MemoryGiB string `json:"memory"`
	Go        string `json:"go"`
	OpenMPI   string `json:"open_mpi"`
	OS        string `json:"os"`
	Command   string `json:"command"`
	Date      string `json:"date"`
}

type benchOut struct {
	Machine benchMachine `json:"machine"`
	Rows    []benchRow   `json:"rows"`
	Missing []string     `json:"missing,omitempty"`
}

// goBench holds parsed `go test -bench` lines: name (without the -GOMAXPROCS
// suffix) -> unit -> value.
type goBench map[string]map[string]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

func parseGoBench(path string) (goBench, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := goBench{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || !strings.HasPrefix(fs[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(fs[0], "Benchmark"), "")
		m := map[string]float64{}
		if n, err := strconv.ParseFloat(fs[1], 64); err == nil {
			m["N"] = n
		}
		for i := 2; i+1 < len(fs); i += 2 {
			if v, err := strconv.ParseFloat(fs[i], 64); err == nil {
				m[fs[i+1]] = v
			}
		}
		out[name] = m
	}
	return out, sc.Err()
}

func benchCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", "Benchmarks next to their references, as ratios: reads what scripts/bench.sh measured under --raw\n"+
		"(go test -bench outputs, out/bench-mpi.json, mpirun reports), runs the in-process executor figures itself,\n"+
		"prints the table and writes it as JSON and Markdown.", benchExamples, stderr)
	raw := fs.String("raw", "out/raw", "folder of raw results from scripts/bench.sh ('' : none)")
	jsonPath := fs.String("json", "out/bench.json", "write the table as JSON here ('' : no)")
	mdPath := fs.String("md", "", "write the table as Markdown here (BENCHMARKS.md) ('' : no)")
	command := fs.String("command", "rankrun bench", "the command line to record in the outputs")
	handoverN := fs.Int("handover-requests", 400, "requests of the in-process handover run")
	seedN := fs.Int("seed-requests", 6, "requests of each seed-shape run")
	cpN := fs.Int("cp-requests", 3000, "requests of each control-plane throughput run")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	out := benchOut{Machine: machineInfo(*raw, *command)}
	add := func(r benchRow) { out.Rows = append(out.Rows, r) }
	missing := func(what string, err error) {
		out.Missing = append(out.Missing, fmt.Sprintf("%s: %v", what, err))
		fmt.Fprintf(stderr, "rankrun bench: %s missing: %v\n", what, err)
	}
	if *raw != "" {
		if err := collectivesRows(*raw, add); err != nil {
			missing("collectives", err)
		}
		if err := transceiverRows(*raw, add); err != nil {
			missing("transceiver", err)
		}
		if err := poolRows(*raw, add); err != nil {
			missing("gpu pool", err)
		}
	}
	if err := executorRows(*raw, *handoverN, *seedN, *cpN, add, missing, stderr); err != nil {
		return err
	}
	printBenchTable(stdout, out)
	if *jsonPath != "" {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if *mdPath != "" {
		if err := writeBenchMarkdown(*mdPath, *raw, out); err != nil {
			return err
		}
	}
	return nil
}

func machineInfo(raw, command string) benchMachine {
	m := benchMachine{CPUs: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Command: command, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), CPUModel: "unknown", MemoryGiB: "unknown", OpenMPI: "not found"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.MemoryGiB = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	if raw != "" {
		if b, err := os.ReadFile(filepath.Join(raw, "ompi-version.txt")); err == nil {
			m.OpenMPI = strings.TrimSpace(string(b))
		}
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// ratioRow fills Ratio and Met: lower is better for "<=" goals, higher for
// ">=" goals.
func ratioRow(r benchRow) benchRow {
	if r.RefValue != 0 {
		r.Ratio = r.Value / r.RefValue
	}
	var lim float64
	switch {
	case strings.HasPrefix(r.Goal, "<="):
		if _, err := fmt.Sscanf(r.Goal, "<=%g", &lim); err == nil && r.RefValue != 0 {
			r.Met = ptr(r.Ratio <= lim)
		}
	case strings.HasPrefix(r.Goal, ">="):
		if _, err := fmt.Sscanf(r.Goal, ">=%g", &lim); err == nil && r.RefValue != 0 {
			r.Met = ptr(r.Ratio >= lim)
		}
	}
	return r
}

func collectivesRows(raw string, add func(benchRow)) error {
	var errs []error
	// MPI: Go binding vs the C reference (scripts/bench-mpi.sh). Each
	// figure is the median over repetitions in which C and Go ran back to
	// back; the ratio is the median of the per-repetition ratios.
	if b, err := os.ReadFile(filepath.Join(raw, "bench-mpi.json")); err != nil {
		errs = append(errs, err)
	} else {
		var mp struct {
			Results []struct {
				NP       int       `json:"np"`
				Bench    string    `json:"bench"`
				Iter     int       `json:"iterations"`
				Reps     int       `json:"reps"`
				Metric   string    `json:"metric"`
				GoNs     float64   `json:"go_ns_per_op"`
				CNs      float64   `json:"c_ns_per_op"`
				CNbNs    float64   `json:"c_nonblocking_ns_per_op"`
				GoMBs    float64   `json:"go_mb_per_s"`
				CMBs     float64   `json:"c_mb_per_s"`
				Allocs   float64   `json:"go_allocs_per_op"`
				Best     float64   `json:"go_over_c_best"`
				Median   float64   `json:"go_over_c_median"`
				Runs     []float64 `json:"go_over_c_runs"`
				Goal     string    `json:"goal"`
				MTNs     float64   `json:"c_thread_multiple_ns_per_op"`
				MTMedian float64   `json:"c_thread_multiple_over_single_median"`
				MTBest   float64   `json:"c_thread_multiple_over_single_min"`
				SameJob  *struct {
					Median float64 `json:"go_over_c_median"`
					Best   float64 `json:"go_over_c_best"`
					Chunks int     `json:"chunks"`
					CNs    float64 `json:"c_ns_per_op"`
					GoNs   float64 `json:"go_ns_per_op"`
				} `json:"same_job"`
			} `json:"results"`
		}
		if err := json.Unmarshal(b, &mp); err != nil {
			errs = append(errs, fmt.Errorf("bench-mpi.json: %w", err))
		}
		// withRatio sets the row's ratio to the median per-repetition
		// ratio (when the JSON has one) and judges the goal on it.
		withRatio := func(r benchRow, median float64) benchRow {
			r = ratioRow(r)
			if median > 0 {
				r.Ratio = median
				r.Met = nil
				var lim float64
				if _, err := fmt.Sscanf(strings.TrimLeft(r.Goal, "<>="), "%g", &lim); err == nil {
					if strings.HasPrefix(r.Goal, "<=") {
						r.Met = ptr(median <= lim)
					} else if strings.HasPrefix(r.Goal, ">=") {
						r.Met = ptr(median >= lim)
					}
				}
			}
			return r
		}
		for _, x := range mp.Results {
			sec := "1 collectives (mpirun)"
			what := map[string]string{"allreduce": "allreduce 1 x int64", "allgather_pair": "allgather counts + allgatherv 0..64 ids",
				"p2p_1MiB": "Isend/Irecv 1 MiB", "p2p_64MiB": "Isend/Irecv 64 MiB"}[x.Bench]
			// The row shows the same-job comparison when there is one
			// (steadier on a shared machine): its medians, and the median of
			// its per-chunk ratios; the separate runs go in the note.
			goV, cV, median := x.GoNs, x.CNs, x.Median
			if x.Metric == "bandwidth" {
				goV, cV = x.GoMBs, x.CMBs
			}
			reps := fmt.Sprintf("separate runs (%d iterations): median of %d back-to-back repetitions %.2fx, best %.2fx", x.Iter, x.Reps, x.Median, x.Best)
			if sj := x.SameJob; sj != nil && sj.GoNs > 0 && sj.CNs > 0 {
				goV, cV, median = sj.GoNs, sj.CNs, sj.Median
				if x.Metric == "bandwidth" {
					bytes := map[string]float64{"p2p_1MiB": 1 << 20, "p2p_64MiB": 64 << 20}[x.Bench]
					goV, cV = bytes/sj.GoNs*1e3, bytes/sj.CNs*1e3 // MB/s
				}
				reps = fmt.Sprintf("same job: median of %d alternating chunks of C and Go, best %.2fx; %s", sj.Chunks, sj.Best, reps)
			}
			if x.Metric == "bandwidth" {
				goal := x.Goal
				if goal == "" {
					goal = ">=0.9"
				}
				add(withRatio(benchRow{Section: sec, Figure: fmt.Sprintf("np=%d %s, Go binding", x.NP, what), Value: goV, Unit: "MB/s",
					Reference: "C MPI_Isend/Irecv + MPI_Wait, same loop", RefValue: cV, Goal: goal, Allocs: ptr(x.Allocs),
					Note: reps}, median))
				continue
			}
			goal := x.Goal
			if goal == "" {
				goal = "<=1.3"
			}
			note := reps
			if x.CNbNs > 0 {
				note += fmt.Sprintf("; C non-blocking + MPI_Test: %.0f ns", x.CNbNs)
			}
			add(withRatio(benchRow{Section: sec, Figure: fmt.Sprintf("np=%d %s, Go binding", x.NP, what), Value: goV, Unit: "ns/op",
				Reference: "C blocking MPI call, same loop", RefValue: cV, Goal: goal, Allocs: ptr(x.Allocs),
				Note: note}, median))
			if x.MTNs > 0 {
				add(withRatio(benchRow{Section: sec, Figure: fmt.Sprintf("np=%d C blocking allreduce under MPI_THREAD_MULTIPLE", x.NP), Value: x.MTNs, Unit: "ns/op",
					Reference: "same, MPI_THREAD_SINGLE", RefValue: x.CNs,
					Note: fmt.Sprintf("what the thread level costs uncontended; best %.2fx", x.MTBest)}, x.MTMedian))
			}
		}
	}
	// In-process world vs a bare sync.Cond barrier (comm/local).
	lb, err := parseGoBench(filepath.Join(raw, "local.txt"))
	if err != nil {
		errs = append(errs, err)
	} else {
		sec := "1 collectives (in-process)"
		for _, n := range []int{2, 4, 8} {
			ref, ok := lb[fmt.Sprintf("ReferenceCondBarrier/ranks=%d", n)]
			if !ok {
				continue
			}
			for _, c := range []struct{ name, what, goal string }{
				{"Allreduce1", "allreduce 1 x int64", "<=1.5"}, {"Barrier", "barrier", "<=1.5"},
				{"Allgather0to64", "allgather 0..64 ids (moves data; the reference does not)", ""},
			} {
				v, ok := lb[fmt.Sprintf("%s/ranks=%d", c.name, n)]
				if !ok {
					continue
				}
				add(ratioRow(benchRow{Section: sec, Figure: fmt.Sprintf("ranks=%d %s", n, c.what), Value: v["ns/op"], Unit: "ns/op",
					Reference: "sync.Cond barrier (+ shared sum)", RefValue: ref["ns/op"], Goal: c.goal, Allocs: ptr(v["allocs/op"])}))
				if ck, ok := lb[fmt.Sprintf("%s/ranks=%d/checked", c.name, n)]; ok {
					add(ratioRow(benchRow{Section: sec, Figure: fmt.Sprintf("ranks=%d %s, checked mode", n, c.what), Value: ck["ns/op"], Unit: "ns/op",
						Reference: "same, unchecked", RefValue: v["ns/op"], Allocs: ptr(ck["allocs/op"]), Note: "checked-mode overhead"}))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// poolRows: the KV block pool's hot operations next to a bare
// mutex-protected free list moving the same 32 block ids.
func poolRows(raw string, add func(benchRow)) error {
	gb, err := parseGoBench(filepath.Join(raw, "gpu.txt"))
	if err != nil {
		return err
	}
	ref, ok := gb["ReferenceFreeList32"]
	if !ok {
		return fmt.Errorf("no ReferenceFreeList32 in gpu.txt")
	}
	sec := "KV block pool (gpu)"
	for _, c := range []struct{ name, what string }{
		{"AllocateRelease32", "TryAllocate + Release of a 32-block request"},
		{"AllocateCtxRelease32", "Allocate(ctx) + Release of a 32-block request"},
		{"LeaseEndLease", "Lease + EndLease of a 32-block request"},
	} {
		v, ok := gb[c.name]
		if !ok {
			continue
		}
		add(ratioRow(benchRow{Section: sec, Figure: c.what, Value: v["ns/op"], Unit: "ns/op",
			Reference: "mutex + free list moving 32 block ids", RefValue: ref["ns/op"], Allocs: ptr(v["allocs/op"]),
			Note: "the pool also tracks owners, leases and states for CheckInvariants"}))
	}
	return nil
}

func transceiverRows(raw string, add func(benchRow)) error {
	tb, err := parseGoBench(filepath.Join(raw, "transceiver.txt"))
	if err != nil {
		return err
	}
	sec := "2 consensus round (in-process)"
	for _, n := range []int{2, 4} {
		for _, ids := range []int{0, 64, 1024} {
			p := fmt.Sprintf("ConsensusRound/ranks=%d/ids=%d/", n, ids)
			c, ok1 := tb[p+"check"]
			b, ok2 := tb[p+"bare"]
			if !ok1 || !ok2 {
				continue
			}
			add(ratioRow(benchRow{Section: sec, Figure: fmt.Sprintf("CTX tp=%d status check, at_least 0, %d terminal-held ids/rank", n, ids),
				Value: c["ns/op"], Unit: "ns/op", Reference: "bare AllgatherInt64s of the same ids, same group", RefValue: b["ns/op"],
				Goal: "<=1.5", Allocs: ptr(c["allocs/op"]), Note: "allocs/op: all ranks together"}))
			if ck, ok := tb[p+"check-checked"]; ok {
				add(ratioRow(benchRow{Section: sec, Figure: fmt.Sprintf("same, ranks=%d ids=%d, checked mode", n, ids), Value: ck["ns/op"], Unit: "ns/op",
					Reference: "same check, unchecked", RefValue: c["ns/op"], Allocs: ptr(ck["allocs/op"]), Note: "checked-mode overhead"}))
			}
		}
	}
	sec = "3 KV transfer CTX tp=1 -> GEN tp=4 (in-process)"
	for _, sz := range []string{"1MiB", "64MiB"} {
		p := "Transfer/frag=" + sz + "/"
		x, ok := tb[p+"transfer"]
		if !ok {
			continue
		}
		if pp, ok := tb[p+"p2p"]; ok {
			add(ratioRow(benchRow{Section: sec, Figure: "fragment " + sz + " x 4 GEN ranks: pack + send + verify + unpack + ack + reap",
				Value: x["xfer-MB/s"], Unit: "MB/s", Reference: "bare Isend/Irecv of the same bytes + 8-byte ack", RefValue: pp["xfer-MB/s"],
				Goal: ">=0.8", Allocs: ptr(x["allocs/op"]), Note: fmt.Sprintf("%.0f us per request vs %.0f us", x["xfer-ns/op"]/1e3, pp["xfer-ns/op"]/1e3)}))
		}
		if mm, ok := tb[p+"memmove"]; ok {
			add(ratioRow(benchRow{Section: sec, Figure: "fragment " + sz + " x 4, same transfer", Value: x["xfer-MB/s"], Unit: "MB/s",
				Reference: "copy() of the same bytes, one goroutine", RefValue: mm["xfer-MB/s"], Goal: ">=0.8"}))
		}
		for _, part := range []string{"fill", "pack", "unpack", "verify"} {
			if v, ok := tb["TransferParts/frag="+sz+"/"+part]; ok {
				what := map[string]string{"fill": "fill (CTX prefill of the pattern; untimed in the transfer)", "pack": "pack (CTX)",
					"unpack": "unpack (GEN)", "verify": "verify every byte (GEN)"}[part]
				add(ratioRow(benchRow{Section: sec, Figure: "  breakdown " + sz + ": " + what, Value: v["ns/op"] / 1e3, Unit: "us/request",
					Reference: "whole transfer, us/request", RefValue: x["xfer-ns/op"] / 1e3, Note: fmt.Sprintf("%.0f MB/s in one goroutine", v["MB/s"])}))
			}
		}
	}
	sec = "6 scaling: status check, at_least 0 (in-process)"
	base := tb["CheckScaling/ranks=2/inflight=10"]
	for _, n := range []int{10, 100, 1000, 10000} {
		if v, ok := tb[fmt.Sprintf("CheckScaling/ranks=2/inflight=%d", n)]; ok && base != nil {
			add(ratioRow(benchRow{Section: sec, Figure: fmt.Sprintf("CTX tp=2, %d sessions in flight per rank", n), Value: v["ns/op"], Unit: "ns/op",
				Reference: "10 sessions in flight", RefValue: base["ns/op"], Allocs: ptr(v["allocs/op"]),
				Note: fmt.Sprintf("%.0f ns per session; StartSend allocates %.0f B/session", v["ns/op"]/float64(n), v["B/session"])}))
		}
	}
	base2 := tb["CheckScaling/ranks=2/inflight=10#01"]
	if base2 == nil {
		base2 = base
	}
	for _, n := range []int{2, 4, 8, 16, 32, 64} {
		name := fmt.Sprintf("CheckScaling/ranks=%d/inflight=10", n)
		if n == 2 {
			name += "#01"
		}
		if v, ok := tb[name]; ok && base2 != nil {
			add(ratioRow(benchRow{Section: sec, Figure: fmt.Sprintf("CTX tp=%d (%d goroutine ranks + 1 GEN), 10 in flight", n, n), Value: v["ns/op"], Unit: "ns/op",
				Reference: "tp=2", RefValue: base2["ns/op"], Allocs: ptr(v["allocs/op"]), Note: fmt.Sprintf("%.2fx per rank added vs tp=2", v["ns/op"]/base2["ns/op"]/(float64(n)/2))}))
		}
	}
	return nil
}

// runLocal runs one in-process executor run (unchecked).
func runLocalBench(cfg executor.Config) (*executor.Report, error) {
	cfg.Log = zap.NewNop()
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return executor.RunLocal(ctx, cfg, false, 30*time.Second)
}

func benchConfig(ctxL, genL string, requests, input, output, closed int) executor.Config {
	return executor.Config{Ctx: topology.MustParseLayout(ctxL), Gen: topology.MustParseLayout(genL), Model: topology.DefaultModel(),
		Workload:  executor.Workload{Requests: requests, InputTokens: input, OutputTokens: output, Arrival: executor.Arrival{Kind: executor.Closed, Concurrency: closed}, Seed: 1},
		CtxBlocks: 512, GenBlocks: 512}
}

// smallBenchModel: small KV (16 KiB for 16 tokens on one rank).
var smallBenchModel = topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2}

const seedGoodIdleStepMs = 210.0 // seed 000: CTX post-prefill idle iteration, good build

func executorRows(raw string, handoverN, seedN, cpN int, add func(benchRow), missing func(string, error), stderr io.Writer) error {
	slice := 200 * time.Millisecond
	// 4: idle handover, in-process, then under mpirun (reports from bench.sh).
	handover := func(label string, clean, bad *executor.Report) {
		sec := "4 idle handover, arrival -> prefill start (" + label + ")"
		for _, q := range []struct {
			name string
			v, b float64
		}{{"p50", clean.IdleHandoverMs.P50, bad.IdleHandoverMs.P50}, {"p99", clean.IdleHandoverMs.P99, bad.IdleHandoverMs.P99}} {
			r := benchRow{Section: sec, Figure: fmt.Sprintf("ctx tp=1 -> gen tp=1, closed=1, decode 5 ms: %s (n=%d)", q.name, clean.IdleHandoverMs.N),
				Value: q.v, Unit: "ms", Reference: fmt.Sprintf("unclamped-poll replay, slice %v (n=%d)", slice, bad.IdleHandoverMs.N), RefValue: q.b}
			r = ratioRow(r)
			if q.name == "p99" {
				r.Goal = "p99 < 1 ms, >= 200x better than 210 ms"
				r.Met = ptr(q.v < 1 && seedGoodIdleStepMs/q.v >= 200)
				r.Note = fmt.Sprintf("seed good idle step 210 ms / p99 = %.0fx", seedGoodIdleStepMs/q.v)
			}
			add(r)
		}
	}
	cfg := benchConfig("tp=1", "tp=1", handoverN, 16, 1, 1)
	cfg.Model = smallBenchModel
	cfg.SenderWaitSlice = slice
	zero, err := runLocalBench(cfg)
	if err != nil {
		return fmt.Errorf("handover run: %w", err)
	}
	add(ratioRow(benchRow{Section: "4 idle handover, arrival -> prefill start (in-process)", Figure: fmt.Sprintf("ctx tp=1 -> gen tp=1, closed=1, zero cost: p99 (n=%d)", zero.IdleHandoverMs.N),
		Value: zero.IdleHandoverMs.P99, Unit: "ms", Reference: "seed 000 good idle step", RefValue: seedGoodIdleStepMs, Goal: "<=0.005",
		Note: fmt.Sprintf("p50 %.4f ms; goal: p99 < 1 ms and >= 200x better than 210 ms", zero.IdleHandoverMs.P50)}))
	// Side by side with the replay: a 5 ms decode step lets the CTX rank
	// reap and go idle before the next arrival, so every arrival meets an
	// idle (or, with the replay, sleeping) rank.
	cfg.Workload.Requests = max(10, handoverN/4)
	cfg.DecodePerStep = 5 * time.Millisecond
	clean, err := runLocalBench(cfg)
	if err != nil {
		return fmt.Errorf("handover run: %w", err)
	}
	cfg.Workload.Requests = 10
	cfg.Replays = executor.ReplaySet{executor.UnclampedPoll: true}
	bad, err := runLocalBench(cfg)
	if err != nil {
		return fmt.Errorf("handover run (unclamped-poll): %w", err)
	}
	handover("in-process", clean, bad)
	if raw != "" {
		mc, err1 := readReport(filepath.Join(raw, "mpi-handover.json"))
		mb, err2 := readReport(filepath.Join(raw, "mpi-handover-unclamped.json"))
		if err := errors.Join(err1, err2); err != nil {
			missing("mpirun handover", err)
		} else {
			handover("mpirun -np 2", mc, mb)
		}
	}

	// 5: the seed workload shape, scaled down.
	sec := "5 seed shape: closed=1, 2048 in / 8 out, prefill 100us/token, decode 10ms/step, slice 200ms"
	for _, pair := range [][2]string{{"tp=1", "tp=4"}, {"dp=2", "tp=4"}} {
		cfg := benchConfig(pair[0], pair[1], seedN, 2048, 8, 1)
		cfg.PrefillPerToken, cfg.DecodePerStep, cfg.SenderWaitSlice = 100*time.Microsecond, 10*time.Millisecond, slice
		off, err := runLocalBench(cfg)
		if err != nil {
			return fmt.Errorf("seed shape %v: %w", pair, err)
		}
		cfg.Replays = executor.ReplaySet{executor.UnclampedPoll: true}
		on, err := runLocalBench(cfg)
		if err != nil {
			return fmt.Errorf("seed shape %v unclamped-poll: %w", pair, err)
		}
		lbl := fmt.Sprintf("ctx %s -> gen %s", pair[0], pair[1])
		add(benchRow{Section: sec, Figure: lbl + ": throughput, unclamped-poll on", Value: on.ThroughputRPS, Unit: "req/s",
			Reference: "replay off", RefValue: off.ThroughputRPS, Ratio: on.ThroughputRPS / off.ThroughputRPS,
			Note: fmt.Sprintf("%+.1f%% (seed 000: -27.7%%)", (on.ThroughputRPS/off.ThroughputRPS-1)*100)})
		add(benchRow{Section: sec, Figure: lbl + ": mean TTFT, unclamped-poll on", Value: on.TTFTMs.Mean, Unit: "ms",
			Reference: "replay off", RefValue: off.TTFTMs.Mean, Ratio: on.TTFTMs.Mean / off.TTFTMs.Mean,
			Note: fmt.Sprintf("%+.2f intervals per request (seed 000: +1 interval)", (on.TTFTMs.Mean-off.TTFTMs.Mean)/float64(slice.Milliseconds()))})
		add(benchRow{Section: sec, Figure: lbl + ": idle step p50, unclamped-poll on", Value: on.IdleStepMs.P50, Unit: "ms",
			Reference: "replay off", RefValue: off.IdleStepMs.P50, Ratio: on.IdleStepMs.P50 / off.IdleStepMs.P50,
			Note: "seed 000: 1151 ms vs 210 ms with a 1000 ms interval"})
	}
	// no-idle-reap applies to a single-rank sync CTX (seed 001).
	{
		cfg := benchConfig("tp=1", "tp=4", seedN*2, 2048, 8, 1)
		cfg.PrefillPerToken, cfg.DecodePerStep, cfg.SenderWaitSlice = 100*time.Microsecond, 10*time.Millisecond, slice
		cfg.Mode = transceiver.Sync
		cfg.CtxBlocks = 3 * 2048 / cfg.Model.TokensPerBlock // room for 3 requests
		cfg.StallTimeout = 2 * time.Second
		off, err := runLocalBench(cfg)
		if err != nil {
			return fmt.Errorf("seed shape sync: %w", err)
		}
		cfg.Replays = executor.ReplaySet{executor.NoIdleReap: true}
		on, err := runLocalBench(cfg)
		v, note := 0.0, ""
		switch {
		case err != nil:
			note = "replay stalls: " + firstLine(err.Error())
		case on != nil:
			v = on.ThroughputRPS
			note = fmt.Sprintf("%d of %d completed", on.RequestsCompleted, cfg.Workload.Requests)
		}
		add(benchRow{Section: sec, Figure: fmt.Sprintf("ctx tp=1 -> gen tp=4, sync transfer, %d CTX blocks (3 requests): throughput, no-idle-reap on", cfg.CtxBlocks),
			Value: v, Unit: "req/s", Reference: "replay off", RefValue: off.ThroughputRPS, Ratio: v / off.ThroughputRPS, Note: note})
	}

	// 6: control-plane throughput, zero compute cost.
	sec = "6 control-plane throughput, zero cost, 16 tokens (16 KiB KV)/request, closed=16 (in-process)"
	var base float64
	for _, gen := range []string{"tp=1", "tp=4"} {
		cfg := benchConfig("tp=1", gen, cpN, 16, 1, 16)
		cfg.Model = smallBenchModel
		rep, err := runLocalBench(cfg)
		if err != nil {
			return fmt.Errorf("control-plane run %s: %w", gen, err)
		}
		if !rep.OK() {
			return fmt.Errorf("control-plane run %s: not clean: %v", gen, rep.Errors)
		}
		r := benchRow{Section: sec, Figure: fmt.Sprintf("ctx tp=1 -> gen %s, %d requests", gen, cpN), Value: rep.ThroughputRPS, Unit: "req/s"}
		if base == 0 {
			base = rep.ThroughputRPS
			r.Reference, r.Note = "none (absolute)", fmt.Sprintf("TTFT p50 %.2f ms", rep.TTFTMs.P50)
		} else {
			r.Reference, r.RefValue, r.Ratio = "ctx tp=1 -> gen tp=1", base, rep.ThroughputRPS/base
			r.Note = fmt.Sprintf("TTFT p50 %.2f ms", rep.TTFTMs.P50)
		}
		add(r)
	}
	if raw != "" {
		if eb, err := parseGoBench(filepath.Join(raw, "executor.txt")); err == nil {
			for _, gen := range []string{"tp=1", "tp=4"} {
				if v, ok := eb["ControlPlane/ctx=tp=1/gen="+gen]; ok {
					add(benchRow{Section: sec, Figure: fmt.Sprintf("go test BenchmarkControlPlane gen %s (%.0f requests)", gen, v["N"]), Value: v["req/s"], Unit: "req/s",
						Reference: "none (cross-check of the row above)", Allocs: ptr(v["allocs/op"]), Note: fmt.Sprintf("%.0f B/request", v["B/op"])})
				}
			}
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

func readReport(path string) (*executor.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r executor.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.IdleHandoverMs.N == 0 {
		return nil, fmt.Errorf("%s: no idle handovers in the report", path)
	}
	return &r, nil
}

func fmtVal(v float64) string {
	switch a := math.Abs(v); {
	case v == 0:
		return "0"
	case a >= 1e5:
		return fmt.Sprintf("%.3g", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.4f", v)
	}
}

func metStr(m *bool) string {
	switch {
	case m == nil:
		return ""
	case *m:
		return "yes"
	default:
		return "NO"
	}
}

func ratioStr(r benchRow) string {
	if r.RefValue == 0 && r.Ratio == 0 {
		return "-"
	}
	if math.Abs(r.Ratio) < 0.1 && r.Ratio != 0 {
		return fmt.Sprintf("%.2gx", r.Ratio)
	}
	return fmt.Sprintf("%.2fx", r.Ratio)
}

func printBenchTable(w io.Writer, out benchOut) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	sec := ""
	for _, r := range out.Rows {
		if r.Section != sec {
			sec = r.Section
			fmt.Fprintf(tw, "\n== %s\n", sec)
			fmt.Fprintf(tw, "figure\tvalue\tunit\treference\tref\tratio\tgoal\tmet\tallocs/op\tnote\n")
		}
		allocs := ""
		if r.Allocs != nil {
			allocs = fmtVal(*r.Allocs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Figure, fmtVal(r.Value), r.Unit, r.Reference, fmtVal(r.RefValue),
			ratioStr(r), r.Goal, metStr(r.Met), allocs, r.Note)
	}
	tw.Flush()
	met, total := 0, 0
	for _, r := range out.Rows {
		if r.Met != nil {
			total++
			if *r.Met {
				met++
			}
		}
	}
	fmt.Fprintf(w, "\ngoals met: %d of %d\n", met, total)
	for _, m := range out.Missing {
		fmt.Fprintf(w, "missing: %s\n", m)
	}
}

// writeBenchMarkdown writes BENCHMARKS.md: the generated table between
// markers, keeping any hand-written analysis after the end marker.
func writeBenchMarkdown(path, raw string, out benchOut) error {
	const begin, end = "<!-- BEGIN GENERATED by rankrun bench -->", "<!-- END GENERATED -->"
	var b strings.Builder
	m := out.Machine
	fmt.Fprintf(&b, "%s\n## Results (generated)\n\n", begin)
	fmt.Fprintf(&b, "- machine: %d CPUs, %s, %s memory, %s\n- Go %s; Open MPI: %s\n- command: `%s`\n- date: %s\n\n",
		m.CPUs, m.CPUModel, m.MemoryGiB, m.OS, m.Go, m.OpenMPI, m.Command, m.Date)
	b.WriteString("Ratio is value / reference for every row (time: lower is better; MB/s and req/s: higher is better). " +
		"All figures and references were measured in this one run.\n")
	sec := ""
	for _, r := range out.Rows {
		if r.Section != sec {
			sec = r.Section
			fmt.Fprintf(&b, "\n### %s\n\n| figure | value | reference | ratio | goal | met | allocs/op | note |\n|---|---|---|---|---|---|---|---|\n", sec)
		}
		allocs := ""
		if r.Allocs != nil {
			allocs = fmtVal(*r.Allocs)
		}
		ref := r.Reference
		if r.RefValue != 0 {
			ref = fmt.Sprintf("%s: %s %s", r.Reference, fmtVal(r.RefValue), r.Unit)
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %s | %s | %s | %s |\n", strings.TrimSpace(r.Figure), fmtVal(r.Value), r.Unit, ref,
			ratioStr(r), r.Goal, metStr(r.Met), allocs, r.Note)
	}
	met, total := 0, 0
	var missed []string
	for _, r := range out.Rows {
		if r.Met != nil {
			total++
			if *r.Met {
				met++
			} else {
				missed = append(missed, r.Section+": "+strings.TrimSpace(r.Figure))
			}
		}
	}
	fmt.Fprintf(&b, "\n**Goals met: %d of %d.**", met, total)
	if len(missed) > 0 {
		b.WriteString(" Not met:\n\n")
		for _, x := range slices.Compact(missed) {
			fmt.Fprintf(&b, "- %s\n", x)
		}
	} else {
		b.WriteString("\n")
	}
	for _, x := range out.Missing {
		fmt.Fprintf(&b, "\nMissing from this run: %s\n", x)
	}
	if raw != "" {
		if prof, err := os.ReadFile(filepath.Join(raw, "transfer-profile.txt")); err == nil {
			fmt.Fprintf(&b, "\n### CPU profile of BenchmarkTransfer/frag=64MiB/transfer (top, flat)\n\n```\n%s\n```\n", strings.TrimSpace(string(prof)))
		}
	}
	b.WriteString(end + "\n")
	head := "# Benchmarks\n\n`make bench` (scripts/bench.sh, then `rankrun bench`) regenerates the section between the markers; text outside them is kept.\n\n"
	tail := ""
	if old, err := os.ReadFile(path); err == nil {
		s := string(old)
		if i := strings.Index(s, begin); i >= 0 {
			head = s[:i]
			if j := strings.Index(s, end); j >= 0 {
				tail = s[j+len(end):]
				tail = strings.TrimPrefix(tail, "\n")
			}
		} else {
			head = s + "\n"
		}
	}
	return os.WriteFile(path, []byte(head+b.String()+tail), 0o644)
}
