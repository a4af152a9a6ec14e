package perfsuite

import (
	"bufio"
	"bytes"
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
	"github.com/rankrun/rankrun/internal/seedtab"
	"github.com/rankrun/rankrun/runspec"
)

// File is the committed figures, from the repository root.
const File = "cmd/rankrun/testdata/perf-figures.txt"

// Case is one run of the suite: rankrun run flags (--backend sim and
// --json are added) and why it is in the set.
type Case struct {
	Name string
	Args string // rankrun run flags (--backend sim is implied)
	Why  string
}

// smallLlama is the workload of the layout-family cases: 32 requests of
// 1024 tokens on Llama-3-8B and H100s, arriving at 20 a second.
const smallLlama = "--model llama-3-8b --hardware h100 --kv-sample 16 --requests 32 --input 1024 --output 32 --arrival poisson=20"

var Cases = []Case{
	// The seeds' configurations, as closely as the presets allow, at a
	// size a test can run: seed 001's gpt-oss-120b on GB200, ctx tp=1 ->
	// gen tp=4, 8k in / 1k out (its con1024 as 16); seed 000's con1.
	{"seed001-shape", "--model gpt-oss-120b --hardware gb200 --ctx tp=1 --gen tp=4 --input 8192 --output 1024 --arrival closed=16 --requests 16 --kv-sample 64",
		"seed 001's model, hardware, layouts and lengths, async"},
	{"seed001-shape-sync", "--model gpt-oss-120b --hardware gb200 --ctx tp=1 --gen tp=4 --input 8192 --output 1024 --arrival closed=16 --requests 16 --kv-sample 64 --transfer sync",
		"seed 001's, in sync mode: the single-rank CTX's idle reap (its fix) on the path"},
	{"seed000-shape", "--model gpt-oss-120b --hardware gb200 --ctx tp=1 --gen tp=4 --input 8192 --output 1024 --arrival closed=1 --requests 4 --kv-sample 64",
		"seed 000's concurrency 1: every handover meets an idle CTX"},
	{"seed000-job", seedtab.Seed000Job, "seed 000's own job: DeepSeek-R1 FP4 (MLA), CTX attention-DP 4 with EP 4, GEN TP 8 with EP 8"},
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

// Figure is one figure of a case.
type Figure struct {
	Name  string
	Value float64
}

// Figures are the figures the suite keeps of a report, in order.
func Figures(r *executor.Report) []Figure {
	perReq := func(n float64) float64 {
		if r.RequestsCompleted == 0 {
			return math.NaN()
		}
		return n / float64(r.RequestsCompleted)
	}
	out := []Figure{
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
		out = append(out, Figure{"peak_kv_" + in.Role, in.PeakKVUtil}, Figure{"iterations_" + in.Role, float64(in.Iterations)})
	}
	return out
}

// RunCase runs c in simulation and returns its figures.
func RunCase(c Case) ([]Figure, error) {
	rep, _, err := runspec.SimulateLine(c.Args, false)
	if err != nil {
		return nil, fmt.Errorf("perf case %s: %w", c.Name, err)
	}
	if rep.Error != nil || !rep.OK() {
		return nil, fmt.Errorf("perf case %s: the run failed: %v %v", c.Name, rep.Error, rep.Errors)
	}
	return Figures(rep), nil
}

// Key names one figure of one case in File.
type Key struct{ Case, Figure string }

// Arch is the architecture whose float rounding the figures have.
func Arch() string { return runtime.GOARCH + "/" + goamd64() }

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

// Committed is a file of committed figures: Path, or where Path is File
// and absent (rankrun bench run away from its repository), BuiltIn, the
// copy the binary was built with.
type Committed struct {
	Path    string
	BuiltIn []byte
}

// read reads the figures' file.
func (c Committed) read() ([]byte, error) {
	b, err := os.ReadFile(c.Path)
	if err != nil && c.Path == File && c.BuiltIn != nil && errors.Is(err, fs.ErrNotExist) {
		return c.BuiltIn, nil
	}
	return b, err
}

// Arch reads the "# arch" line the file was written with ("" if none).
func (c Committed) Arch() string {
	b, err := c.read()
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

// Parse reads the file's figures: "CASE FIGURE VALUE" lines; #
// comments and blank lines are skipped.
func (c Committed) Parse() (map[Key]float64, []Key, error) {
	path := c.Path
	b, err := c.read()
	if err != nil {
		return nil, nil, err
	}
	figs := map[Key]float64{}
	var order []Key
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
		k := Key{fields[0], fields[1]}
		if _, dup := figs[k]; dup {
			return nil, nil, fmt.Errorf("%s:%d: %s %s given twice", path, n, k.Case, k.Figure)
		}
		figs[k] = v
		order = append(order, k)
	}
	return figs, order, sc.Err()
}

// Write writes every case's figures, each value in the shortest
// form that reads back exactly.
func Write(w io.Writer, figs map[string][]Figure) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "# rankrun's perf-regression figures: each case's run in simulation (virtual time: exact, the same on any host of the arch below).")
	fmt.Fprintln(bw, "# make test-perf fails when one moves; make perf-update rewrites this file, and its diff is the review.")
	fmt.Fprintln(bw, "# The cases are internal/perfsuite's Cases; CASE FIGURE VALUE.")
	// The cost model's floats may round differently in the last bits on
	// another architecture (fused multiply-adds, math.Log/Exp): the file
	// says where it was written, and elsewhere figures compare to 1e-6.
	fmt.Fprintf(bw, "# arch %s\n", Arch())
	for _, c := range Cases {
		fmt.Fprintf(bw, "\n# %s: %s\n# rankrun run --backend sim %s\n", c.Name, c.Why, c.Args)
		for _, f := range figs[c.Name] {
			fmt.Fprintf(bw, "%s %s %s\n", c.Name, f.Name, strconv.FormatFloat(f.Value, 'g', -1, 64))
		}
	}
	return bw.Flush()
}

// Change is a figure that differs from the committed one.
type Change struct {
	Key      Key
	Old, New float64
}

func (c Change) String() string {
	var change string
	switch {
	case math.IsNaN(c.Old) || math.IsNaN(c.New):
		change = "no sample on one side"
	case c.Old == 0:
		change = "from 0"
	default:
		change = fmt.Sprintf("%+.2f%%", 100*(c.New-c.Old)/math.Abs(c.Old))
	}
	return fmt.Sprintf("%s %s: %s -> %s (%s)", c.Key.Case, c.Key.Figure, Format(c.Old), Format(c.New), change)
}

func Format(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// Same: exact (within tol, relative, when the file is of another
// architecture), NaN equal to NaN (a case with no sample of a figure).
func Same(a, b, tol float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b || math.Abs(a-b) <= tol*math.Max(math.Abs(a), math.Abs(b))
}

// Tolerance is the relative tolerance of a comparison with the file's
// figures: 0 on the architecture that wrote them, else 1e-6.
func (c Committed) Tolerance() float64 {
	if c.Arch() == Arch() {
		return 0
	}
	return 1e-6
}

// benchFigures are the figures rankrun bench shows of each case.
var benchFigures = map[string]string{
	"throughput_rps": "req/s", "ttft_p99_ms": "ms", "tpot_p50_ms": "ms", "idle_step_p90_ms": "ms", "collectives_per_request": "coll/req",
}

// Rows runs every perf case and adds, for its main figures, a row of
// the figure now beside the committed one: what got faster or slower
// since the file was last written. Lower is better for times and
// collectives, higher for throughput; the note says which way it moved.
func (cm Committed) Rows(add func(benchtab.Row), missing func(string, error)) {
	path := cm.Path
	want, _, err := cm.Parse()
	if err != nil {
		missing("perf-regression figures", err)
		return
	}
	tol := cm.Tolerance()
	for _, c := range Cases {
		figs, err := RunCase(c)
		if err != nil {
			missing("perf case "+c.Name, err)
			continue
		}
		for _, f := range figs {
			unit, ok := benchFigures[f.Name]
			old, had := want[Key{c.Name, f.Name}]
			if !ok || !had {
				continue
			}
			r := benchtab.RatioRow(benchtab.Row{Section: "perf-regression suite (virtual time, against " + path + ")", Figure: c.Name + " " + f.Name,
				Value: f.Value, Unit: unit, Reference: "committed", RefValue: old})
			switch {
			case Same(f.Value, old, tol):
				r.Note = "unchanged"
			case math.IsNaN(f.Value) || math.IsNaN(old):
				r.Value, r.RefValue, r.Ratio = 0, 0, 0 // JSON has no NaN
				r.Note = fmt.Sprintf("changed: %s -> %s", Format(old), Format(f.Value))
			case (f.Value > old) == (f.Name == "throughput_rps"):
				r.Note = "better"
			default:
				r.Note = "worse"
			}
			add(r)
		}
	}
}
