package main

import (
	"bufio"
	"encoding/json"
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

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/topology"
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
	handoverN := fs.Int("handover-requests", 400, "requests of the in-process handover run (>= 1)")
	seedN := fs.Int("seed-requests", 6, "requests of each seed-shape run (>= 1)")
	cpN := fs.Int("cp-requests", 3000, "requests of each control-plane throughput run (>= 1)")
	perfPath := fs.String("perf", perfFile, "the committed perf-regression figures: each case is run and shown beside them ('' : not)")
	seed001 := fs.Bool("seed001", true, "with seed 000's table, seed 001's stall in virtual time (its job: ~100 s and 6 GB)")
	simReps := fs.Int("simspeed-reps", 3, "runs of each simulation-speed figure, the best kept (0: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"handover-requests", *handoverN}, {"seed-requests", *seedN}, {"cp-requests", *cpN}} {
		if n.v < 1 {
			return usagef("--%s %d: must be at least 1", n.flag, n.v)
		}
	}
	if *simReps < 0 {
		return usagef("--simspeed-reps %d: must be at least 0", *simReps)
	}
	// The outputs are written after minutes of measuring: a path that
	// cannot be written is refused now (it was found after the work).
	for _, o := range []struct{ flag, path string }{{"--json", *jsonPath}, {"--md", *mdPath}} {
		if o.path == "" {
			continue
		}
		if err := probeWritable(o.path); err != nil {
			return usagef("%s %s: %v", o.flag, o.path, err)
		}
	}
	if *raw != "" {
		if st, err := os.Stat(*raw); err != nil || !st.IsDir() {
			return usagef("--raw %s: not a folder of raw results (scripts/bench.sh writes them: make bench; --raw '' runs only the in-process figures)", *raw)
		}
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
		if err := statusMPIRows(*raw, add); err != nil {
			missing("status check under mpirun", err)
		}
		if err := xferMPIRows(*raw, add); err != nil {
			missing("KV transfer under mpirun", err)
		}
		if err := poolRows(*raw, add); err != nil {
			missing("gpu pool", err)
		}
		if err := costmodelRows(*raw, add); err != nil {
			missing("cost model finite run", err)
		}
	}
	if err := executorRows(*raw, *handoverN, *seedN, *cpN, add, missing, stderr); err != nil {
		return err
	}
	if *perfPath != "" {
		perfRows(*perfPath, add, missing)
	}
	seedRows(*seed001, add, missing)
	if *simReps > 0 {
		simSpeedRows(*simReps, add, missing)
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

// smallBenchModel: small KV (16 KiB for 16 tokens on one rank).
var smallBenchModel = topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2}

const seedGoodIdleStepMs = 210.0 // seed 000: CTX post-prefill idle iteration, good build

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
