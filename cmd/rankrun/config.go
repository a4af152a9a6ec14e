package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/mpienv"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// runFlags are the flags shared by run and sweep.
type runFlags struct {
	ctx, gen                          string
	layers, heads, headDim, tpb, elem int
	requests, input, output           int
	jitter                            float64
	arrival                           string
	seed                              uint64
	transfer                          string
	verify                            string
	prefill, decode                   time.Duration
	ctxBlocks, genBlocks              int
	maxBatch, maxTokens               int
	chunked                           bool
	slice, genPoll, xferTimeout       time.Duration
	idleTick, stall                   time.Duration
	checked                           bool // --checked (true unless --checked=false); read through collChecked
	checkedSet, unchecked             bool // --checked given explicitly; --unchecked given
	collTimeout                       time.Duration
	replays, faults                   multiFlag
	timeout                           time.Duration
	logLevel                          string
	// The backend, and the simulation's schedule and link model.
	backend      string
	hardware     string
	scheduleSeed uint64
	strategy     string
	pctDepth     int
	msgJitter    time.Duration
	earlyArrive  bool
	// The cost model (model.go).
	model                        string
	experts                      string // --experts E/K: a synthetic MoE routing without --model
	computeEff, memoryEff, kvEff float64
	kvSample                     int
	sampleNote                   string          // the report's note on the default sample
	set                          map[string]bool // flags the command line set
}

// multiFlag is a repeatable flag that also splits on commas where the
// values cannot contain them.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func (f *runFlags) register(fs *flag.FlagSet, layouts bool) {
	def := topology.DefaultModel()
	if layouts {
		fs.StringVar(&f.ctx, "ctx", "tp=1", "CTX (prefill) layout: tp=N,pp=N,cp=N,dp=N,ep=N[,adp]")
		fs.StringVar(&f.gen, "gen", "tp=4", "GEN (decode) layout, same syntax")
	}
	fs.IntVar(&f.layers, "layers", def.Layers, "model: transformer layers (>= 1, at most 65536)")
	fs.IntVar(&f.heads, "kv-heads", def.KVHeads, "model: KV heads per layer (>= 1, at most 65536)")
	fs.IntVar(&f.headDim, "head-dim", def.HeadDim, "model: elements per head per token (>= 1, at most 65536)")
	fs.IntVar(&f.tpb, "tokens-per-block", def.TokensPerBlock, "model: tokens per KV block (>= 1, at most 65536)")
	fs.IntVar(&f.elem, "elem-bytes", def.ElemBytes, "model: bytes per element (>= 1, at most 65536)")
	fs.IntVar(&f.requests, "requests", 64, "workload: number of requests (>= 1)")
	fs.IntVar(&f.input, "input", 256, "workload: input (prompt) tokens per request (>= 1)")
	fs.Float64Var(&f.jitter, "input-jitter", 0, "workload: input lengths vary by +- this fraction, in [0,1) (0: all equal)")
	fs.IntVar(&f.output, "output", 8, "workload: output tokens per request (>= 1)")
	fs.StringVar(&f.arrival, "arrival", "closed=4", "workload: one of burst | rate=R | poisson=R (requests/s, R in (0, 1e7], and at least --requests/1e8: the arrivals span at most 1e8 s) | closed=C (C >= 1 outstanding) | trace=FILE[:from=D][:span=D][:scale=K][:poisson=R] (a production trace replayed: Azure's CSV or Mooncake's JSON lines, e.g. traces/AzureLLMInferenceTrace_conv.csv; from/span pick a window of its recorded time, scale=K replays it K times faster, poisson=R keeps its lengths with Poisson arrivals; --requests N takes the window's first N, unset all of it; the lengths are the trace's, clipped to what the pools hold)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the workload and of injected faults (any value, 0 included)")
	fs.StringVar(&f.transfer, "transfer", "async", "GEN transfer mode: async | sync")
	fs.StringVar(&f.verify, "verify", "full", "how GEN checks received KV bytes: full (every byte, while copying) | checksum (an xxh3 digest of each fragment, sent after it) | off")
	fs.DurationVar(&f.prefill, "prefill-per-token", 0, "cost model: prefill time per input token (0: control plane only)")
	fs.DurationVar(&f.decode, "decode-per-step", 0, "cost model: time per decode step (0: control plane only)")
	fs.IntVar(&f.ctxBlocks, "ctx-blocks", 512, "KV pool blocks per CTX rank (>= 1)")
	fs.IntVar(&f.genBlocks, "gen-blocks", 512, "KV pool blocks per GEN rank (>= 1)")
	fs.IntVar(&f.maxBatch, "max-batch", costmodel.DefaultMaxBatch, "scheduler: most requests in a CTX prefill batch and a GEN decode step, per DP index (0: no limit; default TensorRT-LLM's max_batch_size)")
	fs.IntVar(&f.maxTokens, "max-tokens", costmodel.DefaultMaxTokens, "scheduler: most prompt tokens in a CTX prefill batch per DP index, a longer prompt prefilled alone unless --chunked (0: no limit; default TensorRT-LLM's max_num_tokens)")
	fs.BoolVar(&f.chunked, "chunked", false, "scheduler: chunked prefill on CTX: each step fills --max-tokens, a prompt that does not fit what is left prefilled over several steps "+
		"and sent after its last (default off, as TensorRT-LLM's enable_chunked_prefill)")
	fs.DurationVar(&f.slice, "sender-wait-slice", transceiver.DefaultSenderWaitSlice, "bound of the CTX status check's local poll (> 0)")
	fs.DurationVar(&f.genPoll, "gen-poll-interval", transceiver.DefaultGenPollInterval, "bound of the GEN status check's local poll (> 0)")
	fs.DurationVar(&f.xferTimeout, "transfer-timeout", transceiver.DefaultTransferTimeout, "overall deadline of one transfer, then cancel (> 0)")
	fs.DurationVar(&f.idleTick, "idle-tick", executor.DefaultIdleTick, "longest idle wait between iterations, events end it sooner (> 0)")
	fs.DurationVar(&f.stall, "stall-timeout", executor.DefaultStallTimeout, "waiting work with no progress this long ends the run with ErrStalled (> 0)")
	f.checked = true
	fs.Var(&explicitBool{v: &f.checked, set: &f.checkedSet}, "checked", "checked collectives, the default: desync and timeout errors name call sites and ranks")
	fs.BoolVar(&f.unchecked, "unchecked", false, "turn checked collectives off: cheaper collectives; a desync is then named only where the backend sees it, without call sites")
	fs.DurationVar(&f.collTimeout, "collective-timeout", comm.DefaultCollectiveTimeout,
		"bound of every collective, and of every wait on a peer, checked or not: past it the run ends naming the ranks that never arrived (> 0); in sync mode the collectives after a GEN rank's blocking receives wait, beyond it, the time left to the transfer deadline")
	fs.Var(&f.replays, "replay", "bring back an old bug on purpose (repeatable): "+replayNames())
	fs.Var(&f.faults, "fault", "inject a fault (repeatable): KIND@ROLE:RANK[,req=N][,for=D][,blocks=N][,at=POS] (at=: where corrupt flips a byte: mid, first, last or block/layer/kv/head/token, e.g. last/first/v/last/first)")
	fs.DurationVar(&f.timeout, "timeout", defaultTimeout, "deadline of the whole run (> 0): a run that reaches it ends with an error naming this flag; virtual time under sim; a trace replay's default adds twice its arrivals' span")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level on stderr: debug | info | warn | error")
	fs.StringVar(&f.backend, "backend", "auto", "auto (mpi under mpirun, else local) | local | mpi | sim (every rank in virtual time)")
	f.registerModel(fs)
	fs.Uint64Var(&f.scheduleSeed, "schedule-seed", 0, "sim: seed of the rank schedule (0: --seed); one seed, one run")
	fs.StringVar(&f.strategy, "strategy", "random", "sim: schedule strategy: random | pct")
	fs.IntVar(&f.pctDepth, "pct-depth", 3, "sim: PCT's bug depth d >= 1 (d-1 priority change points)")
	fs.DurationVar(&f.msgJitter, "msg-jitter", 0, "sim: extra delay in [0, D) per message, seeded (messages of one pair keep their order; 0: none)")
	fs.BoolVar(&f.earlyArrive, "early-arrivals", false, "sim: a message in flight may arrive at any point before its receiver's blocking wait, a seeded choice at each poll (run: off; explore: on, --early-arrivals=false turns it off)")
}

// simConfig is the simulation's configuration from the flags.
func (f *runFlags) simConfig() (sim.Config, error) {
	hw, err := f.hardwareProfile()
	if err != nil {
		return sim.Config{}, err
	}
	fab := hw.Fabric
	st, err := sim.ParseStrategy(f.strategy)
	if err != nil {
		return sim.Config{}, usagef("--strategy: %v", err)
	}
	if f.msgJitter < 0 {
		return sim.Config{}, usagef("--msg-jitter %v: must not be negative", f.msgJitter)
	}
	if f.pctDepth < 1 {
		return sim.Config{}, usagef("--pct-depth %d: must be at least 1", f.pctDepth)
	}
	seed := f.scheduleSeed
	if seed == 0 {
		seed = f.seed
	}
	// The run's --timeout is virtual in simulation.
	return sim.Config{Seed: seed, Strategy: st, Depth: f.pctDepth, Checked: f.collChecked(), Timeout: f.collTimeout, Fabric: fab, Jitter: f.msgJitter,
		EarlyArrivals: f.earlyArrive, Deadline: f.timeout, PayloadScale: f.payloadScale(), PayloadTagsFrom: transceiver.DataTagLow,
		PayloadHeader: transceiver.HeaderSize}, nil
}

func replayNames() string {
	var s []string
	for _, r := range executor.Replays {
		s = append(s, string(r))
	}
	return strings.Join(s, ", ")
}

// deadline is the run's --timeout; unset, a trace's replay has the
// default plus twice the time its requests take to arrive (a window of
// an hour's trace would otherwise end at the default).
func (f *runFlags) deadline(c executor.Config) time.Duration {
	if f.set["timeout"] || c.Workload.Arrival.Kind != executor.Traced {
		return f.timeout
	}
	reqs := c.Workload.Generate()
	return max(f.timeout, defaultTimeout+2*reqs[len(reqs)-1].At)
}

// defaultTimeout is --timeout's default.
const defaultTimeout = 10 * time.Minute

// config builds and validates the executor configuration.
func (f *runFlags) config() (executor.Config, error) {
	var c executor.Config
	var err error
	if err := f.checkFlags(); err != nil {
		return c, err
	}
	if c.Ctx, err = topology.ParseLayout(f.ctx); err != nil {
		return c, usagef("--ctx: %v", err)
	}
	if c.Gen, err = topology.ParseLayout(f.gen); err != nil {
		return c, usagef("--gen: %v", err)
	}
	c.Model = topology.Model{Layers: f.layers, KVHeads: f.heads, HeadDim: f.headDim, TokensPerBlock: f.tpb, ElemBytes: f.elem}
	arr, err := executor.ParseArrival(f.arrival)
	if err != nil {
		return c, usagef("--arrival: %v", err)
	}
	c.Workload = executor.Workload{Requests: f.requests, InputTokens: f.input, InputJitter: f.jitter, OutputTokens: f.output, Arrival: arr, Seed: f.seed}
	if arr.Kind == executor.Traced {
		for _, n := range []string{"input", "output", "input-jitter"} {
			if f.set[n] {
				return c, usagef("--%s: a trace's lengths are its own: drop --%s or --arrival %s", n, n, arr)
			}
		}
		first := 0 // the whole window, unless --requests takes its first N
		if f.set["requests"] {
			first = f.requests
			if first < 1 {
				return c, usagef("--requests %d: must be at least 1 (the trace window's first N)", first)
			}
		}
		if c.Workload, err = executor.TraceWorkload(arr, first, f.seed); err != nil {
			if first > 0 {
				return c, usagef("--requests %d with --arrival %s: %v", first, arr, err)
			}
			return c, usagef("--arrival: %v", err)
		}
		f.timeout = f.deadline(c)
	}
	if (arr.Kind == executor.Rate || arr.Kind == executor.Poisson) && f.requests >= 1 && arr.Rate < executor.MinRate(f.requests) {
		return c, usagef("--arrival %s with --requests %d: they would arrive over %.3g s, more than %.0g s; the rate must be at least %.3g requests/s",
			arr, f.requests, float64(f.requests)/arr.Rate, executor.MaxArrivalSpan.Seconds(), executor.MinRate(f.requests))
	}
	if c.Mode, err = transceiver.ParseMode(f.transfer); err != nil {
		return c, usagef("--transfer: %v", err)
	}
	if c.Verify, err = transceiver.ParseVerify(f.verify); err != nil {
		return c, usagef("--verify: %v", err)
	}
	c.PrefillPerToken, c.DecodePerStep = f.prefill, f.decode
	c.CtxBlocks, c.GenBlocks = f.ctxBlocks, f.genBlocks
	c.MaxBatch, c.MaxTokens, c.ChunkedPrefill = f.maxBatch, f.maxTokens, f.chunked
	c.SenderWaitSlice, c.GenPollInterval, c.TransferTimeout = f.slice, f.genPoll, f.xferTimeout
	c.IdleTick, c.StallTimeout = f.idleTick, f.stall
	c.Replays = executor.ReplaySet{}
	for _, v := range f.replays {
		for _, name := range strings.Split(v, ",") {
			if name == "" {
				return c, usagef("--replay %q: an empty name (a stray comma?)", v)
			}
			r, err := executor.ParseReplay(name)
			if err != nil {
				return c, usagef("--replay: %v", err)
			}
			c.Replays[r] = true
		}
	}
	for _, v := range f.faults {
		ft, err := executor.ParseFault(v)
		if err != nil {
			return c, usagef("--fault: %v", err)
		}
		c.Faults = append(c.Faults, ft)
	}
	for i, v := range f.faults {
		if err := c.ValidateFault(i); err != nil {
			return c, usagef("--fault %s: %v", v, err)
		}
	}
	if f.timeout <= 0 {
		return c, usagef("--timeout %v: must be positive", f.timeout)
	}
	if f.collTimeout <= 0 {
		return c, usagef("--collective-timeout %v: must be positive", f.collTimeout)
	}
	if err := f.applyModel(&c); err != nil {
		return c, err
	}
	c.Defaults()
	if err := c.Validate(); err != nil {
		return c, usageError{fmt.Errorf("%w", err)}
	}
	backend := f.backend
	if backend == "auto" {
		backend = "local"
		if mpienv.Detect().UnderMPI {
			backend = "mpi"
		}
	}
	return c, checkSize(backend, &c)
}

// explicitBool is a boolean flag that records whether it was given.
type explicitBool struct{ v, set *bool }

func (b *explicitBool) String() string {
	if b.v == nil {
		return "true"
	}
	return strconv.FormatBool(*b.v)
}

func (b *explicitBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("must be true or false")
	}
	*b.v, *b.set = v, true
	return nil
}

func (b *explicitBool) IsBoolFlag() bool { return true }

// collChecked says whether collectives run checked: the default, unless
// --unchecked or --checked=false.
func (f *runFlags) collChecked() bool { return f.checked && !f.unchecked }
