package main

import (
	"bufio"
	"bytes"
	_ "embed" // perfFileBuiltIn
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/benchtab"
)

// The perf-regression suite: a standard set of runs in simulation, whose
// figures (all virtual time, so exact and the same on any host of one
// architecture; the cost model's floats may round apart on another) are
// committed in perfFile. make test-perf fails when a figure moves; make
// perf-update rewrites the file, and its diff is the review. rankrun bench
// prints the same figures beside the committed ones: what got faster or
// slower.

// perfFile is the committed figures, from the repository root.
const perfFile = "cmd/rankrun/testdata/perf-figures.txt"

// perfCase is one run of the suite: rankrun run flags (--backend sim and
// --json are added) and why it is in the set.
type perfCase struct {
	name string
	args string
	why  string
}

// smallLlama is the workload of the layout-family cases: 32 requests of
// 1024 tokens on Llama-3-8B and H100s, arriving at 20 a second.
const smallLlama = "--model llama-3-8b --hardware h100 --kv-sample 16 --requests 32 --input 1024 --output 32 --arrival poisson=20"

var perfCases = []perfCase{
	// The seeds' configurations, as closely as the presets allow, at a
	// size a test can run: seed 001's gpt-oss-120b on GB200, ctx tp=1 ->
	// gen tp=4, 8k in / 1k out (its con1024 as 16); seed 000's con1.
	{"seed001-shape", "--model gpt-oss-120b --hardware gb200 --ctx tp=1 --gen tp=4 --input 8192 --output 1024 --arrival closed=16 --requests 16 --kv-sample 64",
		"seed 001's model, hardware, layouts and lengths, async"},
	{"seed001-shape-sync", "--model gpt-oss-120b --hardware gb200 --ctx tp=1 --gen tp=4 --input 8192 --output 1024 --arrival closed=16 --requests 16 --kv-sample 64 --transfer sync",
		"seed 001's, in sync mode: the single-rank CTX's idle reap (its fix) on the path"},
	{"seed000-shape", "--model gpt-oss-120b --hardware gb200 --ctx tp=1 --gen tp=4 --input 8192 --output 1024 --arrival closed=1 --requests 4 --kv-sample 64",
		"seed 000's concurrency 1: every handover meets an idle CTX"},
	{"seed000-job", seed000Job, "seed 000's own job: DeepSeek-R1 FP4 (MLA), CTX attention-DP 4 with EP 4, GEN TP 8 with EP 8"},
	// The README's examples.
	{"readme-70b", "--model llama-3-70b --hardware h100 --ctx tp=4 --gen tp=4 --input 1024 --output 64 --arrival poisson=4 --kv-sample 32",
		"the README's cost-model run"},
	{"readme-64-ranks", "--ctx tp=16,pp=2 --gen tp=32 --requests 200 --hardware h200-nvlink-ib400",
		"the README's 64-rank simulation (1000 requests there)"},
	{"readme-unclamped-poll", "--seed 7 --replay unclamped-poll --sender-wait-slice 1s --arrival closed=1 --requests 16",
		"the README's replay run: seed 000's cost, exactly"},
	// A layout per family, both transfer modes.
	{"family-tp-pp", smallLlama + " --ctx tp=2,pp=2 --gen tp=4", "CTX TP x PP"},
	{"family-cp", smallLlama + " --ctx tp=2,cp=2 --gen tp=2", "CTX context parallel"},
	{"family-dp", smallLlama + " --ctx dp=2 --gen tp=2", "CTX data parallel (two instances behind the router)"},
	{"family-gen-pp", smallLlama + " --ctx tp=2 --gen tp=2,pp=2", "GEN pipeline"},
	{"family-adp", "--model deepseek-moe-16b --hardware h100 --kv-sample 16 --requests 32 --input 1024 --output 32 --arrival poisson=20 --ctx tp=2 --gen tp=2,dp=2,adp",
		"GEN attention-DP on a MoE"},
	{"family-sync-adp", smallLlama + " --transfer sync --ctx tp=2 --gen dp=2,adp", "sync transfers, GEN attention-DP"},
}

// perfFigure is one figure of a case.
type perfFigure struct {
	name  string
	value float64
}

// perfFigures are the figures the suite keeps of a report, in order.
func perfFigures(r *executor.Report) []perfFigure {
	perReq := func(n float64) float64 {
		if r.RequestsCompleted == 0 {
			return math.NaN()
		}
		return n / float64(r.RequestsCompleted)
	}
	out := []perfFigure{
		{"completed", float64(r.RequestsCompleted)},
		{"throughput_rps", r.ThroughputRPS},
		{"completion_s", r.CompletionS},
		{"ttft_p50_ms", r.TTFTMs.P50}, {"ttft_p99_ms", r.TTFTMs.P99},
		{"tpot_p50_ms", r.TPOTMs.P50}, {"tpot_p99_ms", r.TPOTMs.P99},
		{"idle_step_p90_ms", r.IdleStepMs.P90}, {"idle_step_max_ms", r.IdleStepMs.Max},
		{"idle_handover_p99_ms", r.IdleHandoverMs.P99},
		// How long a transfer over on its rank waits for the status check
		// that reaps it: its blocks stay pinned meanwhile (seed 001's
		// figure). In async mode a send that ends during a prefill waits
		// for the check after it.
		{"reap_delay_p99_ms", r.ReapDelayMs.P99},
		{"collectives_per_request", perReq(float64(r.Collectives))},
		{"idle_collectives_per_request", perReq(float64(r.IdleCollectives))},
	}
	for _, in := range r.Instances {
		out = append(out, perfFigure{"peak_kv_" + in.Role, in.PeakKVUtil}, perfFigure{"iterations_" + in.Role, float64(in.Iterations)})
	}
	return out
}

// runPerfCase runs c in simulation and returns its figures.
func runPerfCase(c perfCase) ([]perfFigure, error) {
	rep, _, err := runJob(c.args, false)
	if err != nil {
		return nil, fmt.Errorf("perf case %s: %w", c.name, err)
	}
	if rep.Error != nil || !rep.OK() {
		return nil, fmt.Errorf("perf case %s: the run failed: %v %v", c.name, rep.Error, rep.Errors)
	}
	return perfFigures(rep), nil
}

// perfKey names one figure of one case in perfFile.
type perfKey struct{ caseName, figure string }

// perfArch is the architecture whose float rounding the figures have.
func perfArch() string { return runtime.GOARCH + "/" + goamd64() }

// goamd64 is the amd64 level the binary was built for ("" elsewhere).
func goamd64() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "GOAMD64" {
				return s.Value
			}
		}
	}
	if runtime.GOARCH == "amd64" {
		return "v1"
	}
	return ""
}

// perfFileBuiltIn is perfFile as this binary was built: rankrun bench run
// outside the repository compares with it.
//
//go:embed testdata/perf-figures.txt
var perfFileBuiltIn []byte

// readPerfBytes reads path; perfFile (the default) read from anywhere but
// the repository root is the copy built in.
func readPerfBytes(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil && path == perfFile && errors.Is(err, fs.ErrNotExist) {
		return perfFileBuiltIn, nil
	}
	return b, err
}

// readPerfArch reads the "# arch" line perfFile was written with ("" if
// none).
func readPerfArch(path string) string {
	b, err := readPerfBytes(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if a, ok := strings.CutPrefix(line, "# arch "); ok {
			return strings.TrimSpace(a)
		}
	}
	return ""
}

// readPerfFile reads perfFile's figures: "CASE FIGURE VALUE" lines; #
// comments and blank lines are skipped.
func readPerfFile(path string) (map[perfKey]float64, []perfKey, error) {
	b, err := readPerfBytes(path)
	if err != nil {
		return nil, nil, err
	}
	figs := map[perfKey]float64{}
	var order []perfKey
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, nil, fmt.Errorf("%s:%d: want CASE FIGURE VALUE, got %q", path, n, line)
		}
		v, err := strconv.ParseFloat(fields[2], 64)
		if err != nil {
			return nil, nil, fmt.Errorf("%s:%d: value %q: %v", path, n, fields[2], err)
		}
		k := perfKey{fields[0], fields[1]}
		if _, dup := figs[k]; dup {
			return nil, nil, fmt.Errorf("%s:%d: %s %s given twice", path, n, k.caseName, k.figure)
		}
		figs[k] = v
		order = append(order, k)
	}
	return figs, order, sc.Err()
}

// writePerfFile writes every case's figures, each value in the shortest
// form that reads back exactly.
func writePerfFile(w io.Writer, figs map[string][]perfFigure) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "# rankrun's perf-regression figures: each case's run in simulation (virtual time: exact, the same on any host of the arch below).")
	fmt.Fprintln(bw, "# make test-perf fails when one moves; make perf-update rewrites this file, and its diff is the review.")
	fmt.Fprintln(bw, "# The cases are cmd/rankrun/perf.go's perfCases; CASE FIGURE VALUE.")
	// The cost model's floats may round differently in the last bits on
	// another architecture (fused multiply-adds, math.Log/Exp): the file
	// says where it was written, and elsewhere figures compare to 1e-6.
	fmt.Fprintf(bw, "# arch %s\n", perfArch())
	for _, c := range perfCases {
		fmt.Fprintf(bw, "\n# %s: %s\n# rankrun run --backend sim %s\n", c.name, c.why, c.args)
		for _, f := range figs[c.name] {
			fmt.Fprintf(bw, "%s %s %s\n", c.name, f.name, strconv.FormatFloat(f.value, 'g', -1, 64))
		}
	}
	return bw.Flush()
}

// perfChange is a figure that differs from the committed one.
type perfChange struct {
	key      perfKey
	old, new float64
}

func (c perfChange) String() string {
	var change string
	switch {
	case math.IsNaN(c.old) || math.IsNaN(c.new):
		change = "no sample on one side"
	case c.old == 0:
		change = "from 0"
	default:
		change = fmt.Sprintf("%+.2f%%", 100*(c.new-c.old)/math.Abs(c.old))
	}
	return fmt.Sprintf("%s %s: %s -> %s (%s)", c.key.caseName, c.key.figure, fmtPerf(c.old), fmtPerf(c.new), change)
}

func fmtPerf(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// samePerf: exact (within tol, relative, when the file is of another
// architecture), NaN equal to NaN (a case with no sample of a figure).
func samePerf(a, b, tol float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b || math.Abs(a-b) <= tol*math.Max(math.Abs(a), math.Abs(b))
}

// perfTolerance is the relative tolerance of a comparison with the
// figures in path: 0 on the architecture that wrote them, else 1e-6.
func perfTolerance(path string) float64 {
	if readPerfArch(path) == perfArch() {
		return 0
	}
	return 1e-6
}

// perfBenchFigures are the figures rankrun bench shows of each case.
var perfBenchFigures = map[string]string{
	"throughput_rps": "req/s", "ttft_p99_ms": "ms", "tpot_p50_ms": "ms", "idle_step_p90_ms": "ms", "collectives_per_request": "coll/req",
}

// perfRows runs every perf case and adds, for its main figures, a row of
// the figure now beside the committed one (path): what got faster or
// slower since the file was last written. Lower is better for times and
// collectives, higher for throughput; the note says which way it moved.
func perfRows(path string, add func(benchtab.Row), missing func(string, error)) {
	want, _, err := readPerfFile(path)
	if err != nil {
		missing("perf-regression figures", err)
		return
	}
	tol := perfTolerance(path)
	for _, c := range perfCases {
		figs, err := runPerfCase(c)
		if err != nil {
			missing("perf case "+c.name, err)
			continue
		}
		for _, f := range figs {
			unit, ok := perfBenchFigures[f.name]
			old, had := want[perfKey{c.name, f.name}]
			if !ok || !had {
				continue
			}
			r := benchtab.RatioRow(benchtab.Row{Section: "perf-regression suite (virtual time, against " + path + ")", Figure: c.name + " " + f.name,
				Value: f.value, Unit: unit, Reference: "committed", RefValue: old})
			switch {
			case samePerf(f.value, old, tol):
				r.Note = "unchanged"
			case math.IsNaN(f.value) || math.IsNaN(old):
				r.Value, r.RefValue, r.Ratio = 0, 0, 0 // JSON has no NaN
				r.Note = fmt.Sprintf("changed: %s -> %s", fmtPerf(old), fmtPerf(f.value))
			case (f.value > old) == (f.name == "throughput_rps"):
				r.Note = "better"
			default:
				r.Note = "worse"
			}
			add(r)
		}
	}
}
