package scenario

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/runspec"
	"github.com/rankrun/rankrun/topology"
)

// ErrParse: a scenario file is malformed. The error names the file, the line
// and the problem.
var ErrParse = errors.New("scenario: parse error")

// Defaults of a scenario (smaller than the CLI's, so scenarios stay fast).
var (
	DefaultModel             = topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2}
	DefaultTimeout           = 60 * time.Second
	DefaultCollectiveTimeout = 5 * time.Second
)

// Scenario is one parsed scenario file.
type Scenario struct {
	File string // where it came from ("" when built in code)
	Name string

	Ctx, Gen                                string // layouts, as written
	Model                                   topology.Model
	Transfer                                string // async | sync
	Requests, Input, Output                 int
	InputJitter                             float64
	Arrival                                 string
	Seed                                    uint64
	PrefillPerToken, DecodePerStep          time.Duration
	CtxBlocks, GenBlocks                    int
	MaxBatch, MaxTokens                     int  // the step scheduler (0: no limit, the default here)
	Chunked                                 bool // chunked prefill (needs MaxTokens)
	SenderWaitSlice, GenPollInterval        time.Duration
	TransferTimeout, IdleTick, StallTimeout time.Duration
	CollectiveTimeout                       time.Duration
	Replays                                 []executor.Replay // always on
	Faults                                  []string          // as written (executor.ParseFault syntax)

	// Timeout is the deadline of one run.
	Timeout time.Duration
	// ReplayUnderTest, when set, makes the scenario run twice: as written
	// against Expect, and with the replay on against ExpectWithReplay.
	ReplayUnderTest  executor.Replay
	Expect           Expectation
	ExpectWithReplay Expectation
	// Backend, when set (local or sim), is the only in-process backend the
	// scenario runs on; empty: every one of them.
	Backend string
	// Hardware is the simulation's link model (sim.Fabrics; zero cost when
	// empty).
	Hardware string
	// The simulation's schedule: its seed (Seed when 0), strategy and
	// message jitter. A schedule explore found is pinned by these.
	ScheduleSeed uint64
	Strategy     sim.Strategy
	PCTDepth     int // PCT's d (3 when 0)
	MsgJitter    time.Duration
	// Routing is a synthetic MoE routing (key "experts: E/K"), for layouts
	// with ep; none when zero.
	Routing topology.Routing
	// EarlyArrivals: a message in flight may arrive at any point before its
	// receiver's blocking wait, a choice of the schedule
	// (sim.Config.EarlyArrivals; explore's default).
	EarlyArrivals bool
	// ExpectSim and ExpectSimWithReplay add bounds that hold in simulation
	// only, where every time figure is virtual and exact.
	ExpectSim           Expectation
	ExpectSimWithReplay Expectation
}

// InProcess lists the in-process backends a scenario runs on.
var InProcess = []string{"local", "sim"}

// Backends lists the in-process backends this scenario runs on.
func (s *Scenario) Backends() []string {
	if s.Backend != "" {
		return []string{s.Backend}
	}
	return InProcess
}

// New returns a scenario with every default filled in.
func New(name string) Scenario {
	return Scenario{Name: name, Ctx: "tp=1", Gen: "tp=1", Model: DefaultModel, Transfer: "async", Requests: 16, Input: 64, Output: 2,
		Arrival: "closed=4", Seed: 1, CtxBlocks: 64, GenBlocks: 64, SenderWaitSlice: time.Second, GenPollInterval: 5 * time.Second,
		TransferTimeout: 60 * time.Second, IdleTick: 20 * time.Millisecond, StallTimeout: 5 * time.Second,
		CollectiveTimeout: DefaultCollectiveTimeout, Timeout: DefaultTimeout}
}

// Label is how results name the scenario: its file's base name and its name.
func (s *Scenario) Label() string {
	if s.File == "" {
		return s.Name
	}
	return fmt.Sprintf("%s (%s)", filepath.Base(s.File), s.Name)
}

// Spec is the run the scenario describes, with the replay under test on
// when withReplay is true: what `rankrun run` would be given (RunArgs
// prints it as flags), checked by the same rules.
func (s *Scenario) Spec(withReplay bool) runspec.Spec {
	sp := runspec.Default()
	sp.Ctx, sp.Gen = s.Ctx, s.Gen
	if m := s.Model; m != (topology.Model{}) { // a zero model: the default geometry, as the executor's
		sp.Layers, sp.KVHeads, sp.HeadDim, sp.TokensPerBlock, sp.ElemBytes = m.Layers, m.KVHeads, m.HeadDim, m.TokensPerBlock, m.ElemBytes
	}
	sp.Input, sp.Output, sp.InputJitter, sp.Arrival, sp.Seed = s.Input, s.Output, s.InputJitter, s.Arrival, s.Seed
	if s.Requests > 0 || !strings.HasPrefix(s.Arrival, "trace=") { // a trace's 0: its whole window
		sp.Requests = s.Requests
		sp.Set["requests"] = true
	}
	sp.Transfer = s.Transfer
	sp.PrefillPerToken, sp.DecodePerStep = s.PrefillPerToken, s.DecodePerStep
	for _, b := range []struct{ to, from *int }{{&sp.CtxBlocks, &s.CtxBlocks}, {&sp.GenBlocks, &s.GenBlocks}} {
		if *b.from != 0 { // 0: the default pool, as the executor's
			*b.to = *b.from
		}
	}
	sp.MaxBatch, sp.MaxTokens, sp.Chunked = s.MaxBatch, s.MaxTokens, s.Chunked
	// A bound of 0 is the default's (as the executor and the backends
	// read a zero), a scenario's timeout of 0 the command line's default.
	for _, d := range []struct {
		to   *time.Duration
		from time.Duration
	}{{&sp.SenderWaitSlice, s.SenderWaitSlice}, {&sp.GenPollInterval, s.GenPollInterval}, {&sp.TransferTimeout, s.TransferTimeout},
		{&sp.IdleTick, s.IdleTick}, {&sp.StallTimeout, s.StallTimeout}, {&sp.CollectiveTimeout, s.CollectiveTimeout}, {&sp.Timeout, s.Timeout}} {
		if d.from != 0 {
			*d.to = d.from
		}
	}
	sp.Set["timeout"] = true // a scenario's deadline is its own, a trace's too
	for _, r := range s.Replays {
		sp.Replays = append(sp.Replays, string(r))
	}
	if withReplay && s.ReplayUnderTest != "" {
		sp.Replays = append(sp.Replays, string(s.ReplayUnderTest))
	}
	sp.Faults = append(sp.Faults, s.Faults...)
	sp.Routing = s.Routing
	// A scenario describes a run whatever host and backend run it: the
	// world and pools are checked against the simulation's limit, not
	// this host's memory (a run in-process or under mpirun meets its own).
	sp.Backend, sp.HostMemory = "sim", -1
	if s.Backend != "" {
		sp.Backend = s.Backend
	}
	if s.Hardware != "" {
		sp.Hardware = s.Hardware
	}
	sp.ScheduleSeed, sp.Strategy, sp.MsgJitter, sp.EarlyArrivals = s.ScheduleSeed, s.Strategy.String(), s.MsgJitter, s.EarlyArrivals
	if s.PCTDepth != 0 {
		sp.PCTDepth = s.PCTDepth
	}
	return sp
}

// Config is the executor configuration of the run, with the replay under
// test on when withReplay is true.
func (s *Scenario) Config(withReplay bool) (executor.Config, error) {
	sp := s.Spec(withReplay)
	return sp.Config()
}

// Ranks is the number of ranks (mpirun -np) the scenario needs.
func (s *Scenario) Ranks() int {
	c, err := topology.ParseLayout(s.Ctx)
	if err != nil {
		return 0
	}
	g, err := topology.ParseLayout(s.Gen)
	if err != nil {
		return 0
	}
	return c.Ranks() + g.Ranks()
}

// RunArgs is the `rankrun run` argument list equivalent to the run (with
// the replay under test on when withReplay is true), checked mode included.
func (s *Scenario) RunArgs(withReplay bool) []string {
	d := FormatDuration
	a := []string{"--ctx", s.Ctx, "--gen", s.Gen, "--transfer", s.Transfer,
		"--layers", strconv.Itoa(s.Model.Layers), "--kv-heads", strconv.Itoa(s.Model.KVHeads), "--head-dim", strconv.Itoa(s.Model.HeadDim),
		"--tokens-per-block", strconv.Itoa(s.Model.TokensPerBlock), "--elem-bytes", strconv.Itoa(s.Model.ElemBytes),
	}
	if s.Requests > 0 { // 0: a trace's whole window
		a = append(a, "--requests", strconv.Itoa(s.Requests))
	}
	if !strings.HasPrefix(s.Arrival, "trace=") { // a trace's lengths are its own
		a = append(a, "--input", strconv.Itoa(s.Input), "--output", strconv.Itoa(s.Output))
	}
	a = append(a, "--arrival", s.Arrival, "--seed", strconv.FormatUint(s.Seed, 10),
		"--ctx-blocks", strconv.Itoa(s.CtxBlocks), "--gen-blocks", strconv.Itoa(s.GenBlocks),
		// Always given: the CLI's defaults are a serving engine's, a
		// scenario's are no limit, and both runs must be the same run.
		"--max-batch", strconv.Itoa(s.MaxBatch), "--max-tokens", strconv.Itoa(s.MaxTokens))
	if s.Chunked {
		a = append(a, "--chunked")
	}
	if s.Routing.Experts > 0 {
		a = append(a, "--experts", s.Routing.ExpertsString())
	}
	if s.InputJitter != 0 {
		a = append(a, "--input-jitter", strconv.FormatFloat(s.InputJitter, 'g', -1, 64))
	}
	if s.PrefillPerToken != 0 {
		a = append(a, "--prefill-per-token", d(s.PrefillPerToken))
	}
	if s.DecodePerStep != 0 {
		a = append(a, "--decode-per-step", d(s.DecodePerStep))
	}
	a = append(a, "--sender-wait-slice", d(s.SenderWaitSlice), "--gen-poll-interval", d(s.GenPollInterval),
		"--transfer-timeout", d(s.TransferTimeout), "--idle-tick", d(s.IdleTick), "--stall-timeout", d(s.StallTimeout),
		"--checked", "--collective-timeout", d(s.CollectiveTimeout), "--timeout", d(s.Timeout))
	for _, r := range s.Replays {
		a = append(a, "--replay", string(r))
	}
	if withReplay && s.ReplayUnderTest != "" {
		a = append(a, "--replay", string(s.ReplayUnderTest))
	}
	for _, f := range s.Faults {
		a = append(a, "--fault", f)
	}
	return a
}

// CommandLine renders RunArgs as a shell command line starting with
// "rankrun run".
func (s *Scenario) CommandLine(withReplay bool) string { return s.CommandLineOn("local", withReplay) }

// CommandLineOn is CommandLine for a run on backend (local, sim or mpi).
func (s *Scenario) CommandLineOn(backend string, withReplay bool) string {
	parts := []string{"rankrun", "run"}
	args := s.RunArgs(withReplay)
	if backend == "sim" {
		args = append(args, s.SimArgs()...)
	}
	for _, a := range args {
		if strings.ContainsAny(a, " \t'\"|&;<>()$`\\*?[]#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// SimArgs are the `rankrun run` flags of the simulation this scenario
// runs in: --backend sim and its schedule, links and jitter.
func (s *Scenario) SimArgs() []string {
	args := []string{"--backend", "sim"}
	if s.Hardware != "" {
		args = append(args, "--hardware", s.Hardware)
	}
	if s.ScheduleSeed != 0 {
		args = append(args, "--schedule-seed", strconv.FormatUint(s.ScheduleSeed, 10))
	}
	if s.Strategy != sim.RandomWalk {
		args = append(args, "--strategy", s.Strategy.String())
	}
	if s.PCTDepth != 0 {
		args = append(args, "--pct-depth", strconv.Itoa(s.PCTDepth))
	}
	if s.MsgJitter != 0 {
		args = append(args, "--msg-jitter", FormatDuration(s.MsgJitter))
	}
	if s.EarlyArrivals {
		args = append(args, "--early-arrivals")
	}
	return args
}

// FormatDuration is d as a flag value in ASCII: time.Duration's String
// with "us" for "µs" (both parse back to d), so that a printed command
// line can be typed.
func FormatDuration(d time.Duration) string {
	return strings.ReplaceAll(d.String(), "µs", "us")
}

// setter applies one key's value.
type setter func(s *Scenario, v string) error

func boolKey(field func(*Scenario) *bool) setter {
	return func(s *Scenario, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q: want true or false", v)
		}
		*field(s) = b
		return nil
	}
}

func intKey(field func(*Scenario) *int, min int) setter {
	return intKeyIn(field, min, math.MaxInt)
}

// intKeyIn is an integer key in [min, max].
func intKeyIn(field func(*Scenario) *int, min, max int) setter {
	return func(s *Scenario, v string) error {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil || n < min:
			return fmt.Errorf("%q: want an integer >= %d", v, min)
		case n > max:
			return fmt.Errorf("%q: at most %d", v, max)
		}
		*field(s) = n
		return nil
	}
}

func durKey(field func(*Scenario) *time.Duration) setter {
	return func(s *Scenario, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("%q: want a non-negative duration such as 500ms", v)
		}
		*field(s) = d
		return nil
	}
}

func layoutKey(field func(*Scenario) *string) setter {
	return func(s *Scenario, v string) error {
		if _, err := topology.ParseLayout(v); err != nil {
			return err
		}
		*field(s) = v
		return nil
	}
}

var keys = map[string]setter{
	"name": func(s *Scenario, v string) error {
		if v == "" {
			return errors.New("empty name")
		}
		s.Name = v
		return nil
	},
	"ctx":              layoutKey(func(s *Scenario) *string { return &s.Ctx }),
	"gen":              layoutKey(func(s *Scenario) *string { return &s.Gen }),
	"layers":           intKey(func(s *Scenario) *int { return &s.Model.Layers }, 1),
	"kv-heads":         intKey(func(s *Scenario) *int { return &s.Model.KVHeads }, 1),
	"head-dim":         intKey(func(s *Scenario) *int { return &s.Model.HeadDim }, 1),
	"tokens-per-block": intKey(func(s *Scenario) *int { return &s.Model.TokensPerBlock }, 1),
	"elem-bytes":       intKey(func(s *Scenario) *int { return &s.Model.ElemBytes }, 1),
	"transfer": func(s *Scenario, v string) error {
		if v != "async" && v != "sync" {
			return fmt.Errorf("%q: want async or sync", v)
		}
		s.Transfer = v
		return nil
	},
	"requests": intKey(func(s *Scenario) *int { return &s.Requests }, 1),
	"input":    intKey(func(s *Scenario) *int { return &s.Input }, 1),
	"output":   intKey(func(s *Scenario) *int { return &s.Output }, 1),
	"input-jitter": func(s *Scenario, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f >= 1 {
			return fmt.Errorf("%q: want a fraction in [0, 1)", v)
		}
		s.InputJitter = f
		return nil
	},
	"arrival": func(s *Scenario, v string) error {
		if strings.HasPrefix(v, "trace=") {
			s.Arrival = v // read once the file's place is known (Parse)
			return nil
		}
		if _, err := executor.ParseArrival(v); err != nil {
			return err
		}
		s.Arrival = v
		return nil
	},
	"seed": func(s *Scenario, v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q: want a non-negative integer", v)
		}
		s.Seed = n
		return nil
	},
	"prefill-per-token":  durKey(func(s *Scenario) *time.Duration { return &s.PrefillPerToken }),
	"decode-per-step":    durKey(func(s *Scenario) *time.Duration { return &s.DecodePerStep }),
	"ctx-blocks":         intKeyIn(func(s *Scenario) *int { return &s.CtxBlocks }, 1, kvpool.MaxBlocks),
	"gen-blocks":         intKeyIn(func(s *Scenario) *int { return &s.GenBlocks }, 1, kvpool.MaxBlocks),
	"max-batch":          intKey(func(s *Scenario) *int { return &s.MaxBatch }, 0),
	"max-tokens":         intKey(func(s *Scenario) *int { return &s.MaxTokens }, 0),
	"chunked":            boolKey(func(s *Scenario) *bool { return &s.Chunked }),
	"sender-wait-slice":  durKey(func(s *Scenario) *time.Duration { return &s.SenderWaitSlice }),
	"gen-poll-interval":  durKey(func(s *Scenario) *time.Duration { return &s.GenPollInterval }),
	"transfer-timeout":   durKey(func(s *Scenario) *time.Duration { return &s.TransferTimeout }),
	"idle-tick":          durKey(func(s *Scenario) *time.Duration { return &s.IdleTick }),
	"stall-timeout":      durKey(func(s *Scenario) *time.Duration { return &s.StallTimeout }),
	"collective-timeout": durKey(func(s *Scenario) *time.Duration { return &s.CollectiveTimeout }),
	"timeout":            durKey(func(s *Scenario) *time.Duration { return &s.Timeout }),
	"replay": func(s *Scenario, v string) error {
		r, err := executor.ParseReplay(v)
		if err != nil {
			return err
		}
		s.Replays = append(s.Replays, r)
		return nil
	},
	"replay-under-test": func(s *Scenario, v string) error {
		r, err := executor.ParseReplay(v)
		if err != nil {
			return err
		}
		s.ReplayUnderTest = r
		return nil
	},
	"fault": func(s *Scenario, v string) error {
		if _, err := executor.ParseFault(v); err != nil {
			return err
		}
		s.Faults = append(s.Faults, v)
		return nil
	},
	"expect":                 func(s *Scenario, v string) error { return s.Expect.add(v) },
	"expect-with-replay":     func(s *Scenario, v string) error { return s.ExpectWithReplay.add(v) },
	"expect-sim":             func(s *Scenario, v string) error { return s.ExpectSim.addBound(v) },
	"expect-sim-with-replay": func(s *Scenario, v string) error { return s.ExpectSimWithReplay.addBound(v) },
	"backend": func(s *Scenario, v string) error {
		if v != "local" && v != "sim" {
			return fmt.Errorf("%q: want local or sim (the in-process backends; without the key a scenario runs on both)", v)
		}
		s.Backend = v
		return nil
	},
	"schedule-seed": func(s *Scenario, v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q: want a non-negative integer", v)
		}
		s.ScheduleSeed = n
		return nil
	},
	"strategy": func(s *Scenario, v string) error {
		st, err := sim.ParseStrategy(v)
		s.Strategy = st
		return err
	},
	"msg-jitter": durKey(func(s *Scenario) *time.Duration { return &s.MsgJitter }),
	"experts": func(s *Scenario, v string) error {
		r, err := topology.ParseExperts(v)
		s.Routing = r
		return err
	},
	"early-arrivals": boolKey(func(s *Scenario) *bool { return &s.EarlyArrivals }),
	"pct-depth":      intKey(func(s *Scenario) *int { return &s.PCTDepth }, 1),
	"hardware": func(s *Scenario, v string) error {
		if _, err := sim.ParseFabric(v); err != nil {
			return err
		}
		s.Hardware = v
		return nil
	},
}

// Keys lists every valid key, sorted.
func Keys() []string {
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// pairSep separates several pairs on one line: two or more spaces, or a tab.
var pairSep = regexp.MustCompile(`\t+ *| {2,}`)

// stripComment removes a "#" comment that is not inside double quotes.
func stripComment(line string) string {
	in := false
	for i, r := range line {
		switch r {
		case '"':
			in = !in
		case '#':
			if !in {
				return line[:i]
			}
		}
	}
	return line
}

// joinedKey is a key that a value holds after a single space ("tp=2 gen:
// tp=4": two pairs one space apart), outside double quotes; "" if none.
func joinedKey(v string) string {
	in := false
	fields := strings.FieldsFunc(v, func(r rune) bool {
		if r == '"' {
			in = !in
		}
		return !in && r == ' '
	})
	for _, f := range fields[min(1, len(fields)):] {
		if k, ok := strings.CutSuffix(f, ":"); ok && keys[k] != nil {
			return k
		}
	}
	return ""
}

// ParseFile reads and parses one scenario file.
func ParseFile(path string) (Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("%w: %w", ErrParse, err)
	}
	defer f.Close()
	return Parse(path, f)
}

// Parse parses a scenario; name is used in errors (a file path).
func Parse(name string, r io.Reader) (Scenario, error) {
	s := New("")
	s.File = name
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrParse, name, line, fmt.Sprintf(format, args...))
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	seen := map[string]int{}
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(stripComment(sc.Text()))
		if line == "" {
			continue
		}
		for _, pair := range pairSep.Split(line, -1) {
			k, v, ok := strings.Cut(pair, ":")
			if !ok {
				return s, bad(n, "%q: want key: value (valid keys: %s)", pair, strings.Join(Keys(), ", "))
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			set, ok := keys[k]
			if !ok {
				return s, bad(n, "unknown key %q: valid keys are %s", k, strings.Join(Keys(), ", "))
			}
			if other := joinedKey(v); other != "" {
				return s, bad(n, "%s: the value %q holds another key %q: separate pairs on one line by two spaces or a tab (one space joins them; see scenario/FORMAT.md)",
					k, v, other+":")
			}
			repeatable := k == "fault" || k == "replay" || strings.HasPrefix(k, "expect")
			if prev, dup := seen[k]; dup && !repeatable {
				return s, bad(n, "key %q repeated (first on line %d)", k, prev)
			}
			seen[k] = n
			if err := set(&s, v); err != nil {
				return s, bad(n, "%s: %v", k, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("%w: %s: %w", ErrParse, name, err)
	}
	// Whole-file rules.
	if spec, ok := strings.CutPrefix(s.Arrival, "trace="); ok {
		// A trace's path is the scenario file's, relative to its folder.
		if path, _, _ := strings.Cut(spec, ":"); !filepath.IsAbs(path) && name != "" {
			s.Arrival = "trace=" + filepath.Join(filepath.Dir(name), spec)
		}
		if _, err := executor.ParseArrival(s.Arrival); err != nil {
			return s, bad(seen["arrival"], "arrival: %v", err)
		}
		for _, k := range []string{"input", "output", "input-jitter"} {
			if line, ok := seen[k]; ok {
				return s, bad(line, "%s: a trace's lengths are its own: drop %s or the trace (arrival: %s)", k, k, spec)
			}
		}
		if _, ok := seen["requests"]; !ok {
			s.Requests = 0 // the whole window, as rankrun run without --requests
		}
	}
	for _, k := range []string{"name", "ctx", "gen", "expect"} {
		if _, ok := seen[k]; !ok {
			return s, bad(n, "missing key %q", k)
		}
	}
	for _, k := range []string{"ctx", "gen"} {
		v := s.Ctx
		if k == "gen" {
			v = s.Gen
		}
		if l, err := topology.ParseLayout(v); err == nil && l.EP > 1 && s.Routing.Experts == 0 {
			// A scenario has no cost model: its experts, if any, are
			// synthetic (experts: E/K).
			return s, bad(seen[k], "%s: %q: ep needs a mixture-of-experts model, and a scenario has none: give experts: E/K (E routed experts, K per token)", k, v)
		}
	}
	if err := s.Expect.validate(); err != nil {
		return s, bad(seen["expect"], "expect: %v", err)
	}
	_, hasWith := seen["expect-with-replay"]
	switch {
	case s.ReplayUnderTest != "" && !hasWith:
		return s, bad(seen["replay-under-test"], "replay-under-test needs expect-with-replay lines (the symptom the replay must show)")
	case s.ReplayUnderTest == "" && hasWith:
		return s, bad(seen["expect-with-replay"], "expect-with-replay needs replay-under-test: NAME (valid replays: %s)", replayNames())
	case hasWith:
		if err := s.ExpectWithReplay.validate(); err != nil {
			return s, bad(seen["expect-with-replay"], "expect-with-replay: %v", err)
		}
		if slices.Contains(s.Replays, s.ReplayUnderTest) {
			return s, bad(seen["replay-under-test"], "replay %s is both always on (replay:) and under test", s.ReplayUnderTest)
		}
	}
	if _, err := s.Config(s.ReplayUnderTest != ""); err != nil {
		// The key to blame, where the rule names one: a flag of rankrun
		// run is the key of the same name.
		var se *runspec.Error
		if errors.As(err, &se) && seen[se.Field] > 0 {
			return s, bad(seen[se.Field], "the run it describes is invalid: %s", strings.TrimPrefix(err.Error(), "--"))
		}
		return s, bad(n, "the run it describes is invalid: %s", strings.TrimPrefix(err.Error(), "--"))
	}
	return s, nil
}

func replayNames() string {
	names := make([]string, len(executor.Replays))
	for i, r := range executor.Replays {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// Format renders the scenario back in the file syntax (round-trips through
// Parse).
func (s *Scenario) Format() string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\n", s.Name)
	args := s.RunArgs(false)
	for i := 0; i < len(args); i++ {
		k := strings.TrimPrefix(args[i], "--")
		switch k {
		case "checked":
			continue
		case "chunked": // a flag without a value
			fmt.Fprintf(&b, "chunked: true\n")
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", k, args[i+1])
		i++
	}
	if s.Backend != "" {
		fmt.Fprintf(&b, "backend: %s\n", s.Backend)
	}
	if s.Hardware != "" {
		fmt.Fprintf(&b, "hardware: %s\n", s.Hardware)
	}
	if s.ScheduleSeed != 0 {
		fmt.Fprintf(&b, "schedule-seed: %d\n", s.ScheduleSeed)
	}
	if s.Strategy != sim.RandomWalk {
		fmt.Fprintf(&b, "strategy: %s\n", s.Strategy)
	}
	if s.PCTDepth != 0 {
		fmt.Fprintf(&b, "pct-depth: %d\n", s.PCTDepth)
	}
	if s.MsgJitter != 0 {
		fmt.Fprintf(&b, "msg-jitter: %s\n", s.MsgJitter)
	}
	if s.EarlyArrivals {
		b.WriteString("early-arrivals: true\n")
	}
	if s.Routing.Experts > 0 {
		fmt.Fprintf(&b, "experts: %s\n", s.Routing.ExpertsString())
	}
	if s.ReplayUnderTest != "" {
		fmt.Fprintf(&b, "replay-under-test: %s\n", s.ReplayUnderTest)
	}
	for _, l := range s.Expect.lines() {
		fmt.Fprintf(&b, "expect: %s\n", l)
	}
	for _, l := range s.ExpectWithReplay.lines() {
		fmt.Fprintf(&b, "expect-with-replay: %s\n", l)
	}
	for _, l := range s.ExpectSim.lines() {
		fmt.Fprintf(&b, "expect-sim: %s\n", l)
	}
	for _, l := range s.ExpectSimWithReplay.lines() {
		fmt.Fprintf(&b, "expect-sim-with-replay: %s\n", l)
	}
	return b.String()
}
