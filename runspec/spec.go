package runspec

import (
	"flag"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rankrun/rankrun/topology"
)

// Spec is the description of one run as a user gives it: flags on the
// command line (Register), or fields set in Go (scenario files, perf cases,
// seed tables, sweep cells, goodput probes). Config validates it and yields
// the executor's configuration; every rule that refuses a value lives here,
// once, and names the flag.
//
// Layouts, the arrival pattern, replays and faults are held as written
// (Config parses them), so that a refusal quotes what the user wrote.
type Spec struct {
	Ctx, Gen string // layouts: tp=N,pp=N,cp=N,dp=N,ep=N[,adp]

	// The KV geometry without a cost model (a --model defines its own).
	Layers, KVHeads, HeadDim, TokensPerBlock, ElemBytes int

	// The workload.
	Requests, Input, Output int
	InputJitter             float64
	Arrival                 string
	Seed                    uint64

	// Transfers and the scheduler.
	Transfer, Verify                 string
	PrefillPerToken, DecodePerStep   time.Duration
	CtxBlocks, GenBlocks             int
	MaxBatch, MaxTokens              int
	Chunked                          bool
	SenderWaitSlice, GenPollInterval time.Duration
	TransferTimeout                  time.Duration
	IdleTick, StallTimeout           time.Duration

	// Checked collectives: Checked (true unless --checked=false) and not
	// Unchecked; read through CollChecked.
	Checked, Unchecked bool
	checkedSet         bool // --checked given explicitly
	CollectiveTimeout  time.Duration

	Replays, Faults MultiFlag
	Timeout         time.Duration // the whole run's deadline (virtual under sim)
	LogLevel        string

	// The backend, and the simulation's schedule and link model.
	Backend       string // auto | local | mpi | sim
	Hardware      string
	ScheduleSeed  uint64
	Strategy      string
	PCTDepth      int
	MsgJitter     time.Duration
	EarlyArrivals bool

	// The cost model (model.go).
	ModelName                    string // --model: a preset or a JSON file
	Experts                      string // --experts E/K: a synthetic MoE routing without --model
	ComputeEff, MemoryEff, KVEff float64
	KVSample                     int

	// HostMemory is the memory the in-process pools may use, in bytes
	// (0: this host's; negative: no bound, for a description of a run that
	// another host will run). Pools that do not fit are refused, and the
	// default sample under sim must fit half of it.
	HostMemory int64
	// Routing is a synthetic MoE routing given in Go (a scenario's, which
	// may group its experts); it stands for Experts when set.
	Routing topology.Routing

	// SampleNote is the report's note on the default sample (Config sets it).
	SampleNote string
	// Set holds the flags the user gave (NoteSet): an unset flag may take
	// a default that depends on others.
	Set map[string]bool
}

// Default is a Spec with every flag at its default, as Register sets them.
func Default() Spec {
	s := defaults()
	s.Set = map[string]bool{}
	return s
}

// defaults is Register's defaults, made once (a scenario's Config, which
// explore calls for every candidate it shrinks to, starts from them).
var defaults = sync.OnceValue(func() Spec {
	var s Spec
	s.Register(flag.NewFlagSet("", flag.ContinueOnError), true)
	return s
})

// Parse is the Spec of a `rankrun run` flag list (without the command
// name), for tables of runs written as command lines (perf cases, seed
// tables): they then read as what a user would type.
func Parse(args []string) (Spec, error) {
	var s Spec
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.Register(fs, true)
	if err := fs.Parse(args); err != nil {
		return s, errorf("%v", err)
	}
	if fs.NArg() > 0 {
		return s, errorf("unexpected argument %q", fs.Arg(0))
	}
	s.NoteSet(fs)
	return s, nil
}

// MultiFlag is a repeatable flag that also splits on commas where the
// values cannot contain them.
type MultiFlag []string

func (m *MultiFlag) String() string     { return strings.Join(*m, " ") }
func (m *MultiFlag) Set(v string) error { *m = append(*m, v); return nil }
