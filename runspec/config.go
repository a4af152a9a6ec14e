package runspec

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

// Register adds the run's flags to fs at their defaults, the layouts' (--ctx,
// --gen) only when layouts is true (a command that sets them itself, as
// sweep's pairs, leaves them out).
func (s *Spec) Register(fs *flag.FlagSet, layouts bool) {
	def := topology.DefaultModel()
	if layouts {
		fs.StringVar(&s.Ctx, "ctx", "tp=1", "CTX (prefill) layout: tp=N,pp=N,cp=N,dp=N,ep=N[,adp]")
		fs.StringVar(&s.Gen, "gen", "tp=4", "GEN (decode) layout, same syntax")
	}
	fs.IntVar(&s.Layers, "layers", def.Layers, "model: transformer layers (>= 1, at most 65536)")
	fs.IntVar(&s.KVHeads, "kv-heads", def.KVHeads, "model: KV heads per layer (>= 1, at most 65536)")
	fs.IntVar(&s.HeadDim, "head-dim", def.HeadDim, "model: elements per head per token (>= 1, at most 65536)")
	fs.IntVar(&s.TokensPerBlock, "tokens-per-block", def.TokensPerBlock, "model: tokens per KV block (>= 1, at most 65536)")
	fs.IntVar(&s.ElemBytes, "elem-bytes", def.ElemBytes, "model: bytes per element (>= 1, at most 65536)")
	fs.IntVar(&s.Requests, "requests", 64, "workload: number of requests (>= 1)")
	fs.IntVar(&s.Input, "input", 256, "workload: input (prompt) tokens per request (>= 1)")
	fs.Float64Var(&s.InputJitter, "input-jitter", 0, "workload: input lengths vary by +- this fraction, in [0,1) (0: all equal)")
	fs.IntVar(&s.Output, "output", 8, "workload: output tokens per request (>= 1)")
	fs.StringVar(&s.Arrival, "arrival", "closed=4", "workload: one of burst | rate=R | poisson=R (requests/s, R in (0, 1e7], and at least --requests/1e8: the arrivals span at most 1e8 s) | closed=C (C >= 1 outstanding) | trace=FILE[:from=D][:span=D][:scale=K][:poisson=R] (a production trace replayed: Azure's CSV or Mooncake's JSON lines, e.g. traces/AzureLLMInferenceTrace_conv.csv; from/span pick a window of its recorded time, scale=K replays it K times faster, poisson=R keeps its lengths with Poisson arrivals; --requests N takes the window's first N, unset all of it; the lengths are the trace's, clipped to what the pools hold)")
	fs.Uint64Var(&s.Seed, "seed", 1, "seed of the workload and of injected faults (any value, 0 included)")
	fs.StringVar(&s.Transfer, "transfer", "async", "GEN transfer mode: async | sync")
	fs.StringVar(&s.Verify, "verify", "full", "how GEN checks received KV bytes: full (every byte, while copying) | checksum (an xxh3 digest of each fragment, sent after it) | off")
	fs.DurationVar(&s.PrefillPerToken, "prefill-per-token", 0, "cost model: prefill time per input token (0: control plane only)")
	fs.DurationVar(&s.DecodePerStep, "decode-per-step", 0, "cost model: time per decode step (0: control plane only)")
	fs.IntVar(&s.CtxBlocks, "ctx-blocks", 512, "KV pool blocks per CTX rank (>= 1)")
	fs.IntVar(&s.GenBlocks, "gen-blocks", 512, "KV pool blocks per GEN rank (>= 1)")
	fs.IntVar(&s.MaxBatch, "max-batch", costmodel.DefaultMaxBatch, "scheduler: most requests in a CTX prefill batch and a GEN decode step, per DP index (0: no limit; default TensorRT-LLM's max_batch_size)")
	fs.IntVar(&s.MaxTokens, "max-tokens", costmodel.DefaultMaxTokens, "scheduler: most prompt tokens in a CTX prefill batch per DP index, a longer prompt prefilled alone unless --chunked (0: no limit; default TensorRT-LLM's max_num_tokens)")
	fs.BoolVar(&s.Chunked, "chunked", false, "scheduler: chunked prefill on CTX: each step fills --max-tokens, a prompt that does not fit what is left prefilled over several steps "+
		"and sent after its last (default off, as TensorRT-LLM's enable_chunked_prefill)")
	fs.DurationVar(&s.SenderWaitSlice, "sender-wait-slice", transceiver.DefaultSenderWaitSlice, "bound of the CTX status check's local poll (> 0)")
	fs.DurationVar(&s.GenPollInterval, "gen-poll-interval", transceiver.DefaultGenPollInterval, "bound of the GEN status check's local poll (> 0)")
	fs.DurationVar(&s.TransferTimeout, "transfer-timeout", transceiver.DefaultTransferTimeout, "overall deadline of one transfer, then cancel (> 0)")
	fs.DurationVar(&s.IdleTick, "idle-tick", executor.DefaultIdleTick, "longest idle wait between iterations, events end it sooner (> 0)")
	fs.DurationVar(&s.StallTimeout, "stall-timeout", executor.DefaultStallTimeout, "waiting work with no progress this long ends the run with ErrStalled (> 0)")
	s.Checked = true
	fs.Var(&explicitBool{v: &s.Checked, set: &s.checkedSet}, "checked", "checked collectives, the default: desync and timeout errors name call sites and ranks")
	fs.BoolVar(&s.Unchecked, "unchecked", false, "turn checked collectives off: cheaper collectives; a desync is then named only where the backend sees it, without call sites")
	fs.DurationVar(&s.CollectiveTimeout, "collective-timeout", comm.DefaultCollectiveTimeout,
		"bound of every collective, and of every wait on a peer, checked or not: past it the run ends naming the ranks that never arrived (> 0); in sync mode the collectives after a GEN rank's blocking receives wait, beyond it, the time left to the transfer deadline")
	fs.Var(&s.Replays, "replay", "bring back an old bug on purpose (repeatable): "+replayNames())
	fs.Var(&s.Faults, "fault", "inject a fault (repeatable): KIND@ROLE:RANK[,req=N][,for=D][,blocks=N][,at=POS] (at=: where corrupt flips a byte: mid, first, last or block/layer/kv/head/token, e.g. last/first/v/last/first)")
	fs.DurationVar(&s.Timeout, "timeout", DefaultTimeout, "deadline of the whole run (> 0): a run that reaches it ends with an error naming this flag; virtual time under sim; a trace replay's default adds twice its arrivals' span")
	fs.StringVar(&s.LogLevel, "log-level", "warn", "log level on stderr: debug | info | warn | error")
	fs.StringVar(&s.Backend, "backend", "auto", "auto (mpi under mpirun, else local) | local | mpi | sim (every rank in virtual time)")
	s.registerModel(fs)
	fs.Uint64Var(&s.ScheduleSeed, "schedule-seed", 0, "sim: seed of the rank schedule (0: --seed); one seed, one run")
	fs.StringVar(&s.Strategy, "strategy", "random", "sim: schedule strategy: random | pct")
	fs.IntVar(&s.PCTDepth, "pct-depth", 3, "sim: PCT's bug depth d >= 1 (d-1 priority change points)")
	fs.DurationVar(&s.MsgJitter, "msg-jitter", 0, "sim: extra delay in [0, D) per message, seeded (messages of one pair keep their order; 0: none)")
	fs.BoolVar(&s.EarlyArrivals, "early-arrivals", false, "sim: a message in flight may arrive at any point before its receiver's blocking wait, a seeded choice at each poll (run: off; explore: on, --early-arrivals=false turns it off)")
}

// SimConfig is the simulation's configuration: its schedule, links, jitter
// and deadline, all virtual.
func (s *Spec) SimConfig() (sim.Config, error) {
	hw, err := s.HardwareProfile()
	if err != nil {
		return sim.Config{}, err
	}
	fab := hw.Fabric
	st, err := sim.ParseStrategy(s.Strategy)
	if err != nil {
		return sim.Config{}, errorf("--strategy: %v", err)
	}
	if s.MsgJitter < 0 {
		return sim.Config{}, errorf("--msg-jitter %v: must not be negative", s.MsgJitter)
	}
	if s.PCTDepth < 1 {
		return sim.Config{}, errorf("--pct-depth %d: must be at least 1", s.PCTDepth)
	}
	seed := s.ScheduleSeed
	if seed == 0 {
		seed = s.Seed
	}
	// The run's --timeout is virtual in simulation.
	return sim.Config{Seed: seed, Strategy: st, Depth: s.PCTDepth, Checked: s.CollChecked(), Timeout: s.CollectiveTimeout, Fabric: fab, Jitter: s.MsgJitter,
		EarlyArrivals: s.EarlyArrivals, Deadline: s.Timeout, PayloadScale: s.PayloadScale(), PayloadTagsFrom: transceiver.DataTagLow,
		PayloadHeader: transceiver.HeaderSize}, nil
}

func replayNames() string {
	var s []string
	for _, r := range executor.Replays {
		s = append(s, string(r))
	}
	return strings.Join(s, ", ")
}

// Deadline is the run's --timeout; unset, a trace's replay has the
// default plus twice the time its requests take to arrive (a window of
// an hour's trace would otherwise end at the default).
func (s *Spec) Deadline(c executor.Config) time.Duration {
	if s.Set["timeout"] || c.Workload.Arrival.Kind != executor.Traced {
		return s.Timeout
	}
	reqs := c.Workload.Generate()
	return max(s.Timeout, DefaultTimeout+2*reqs[len(reqs)-1].At)
}

// DefaultTimeout is --timeout's default.
const DefaultTimeout = 10 * time.Minute

// Config checks every field by the flag it names and yields the executor's
// configuration; an unset --timeout of a trace's replay grows to cover its
// arrivals.
func (s *Spec) Config() (executor.Config, error) {
	var c executor.Config
	var err error
	if err := s.checkFlags(); err != nil {
		return c, err
	}
	if c.Ctx, err = topology.ParseLayout(s.Ctx); err != nil {
		return c, errorf("--ctx: %v", err)
	}
	if c.Gen, err = topology.ParseLayout(s.Gen); err != nil {
		return c, errorf("--gen: %v", err)
	}
	c.Model = topology.Model{Layers: s.Layers, KVHeads: s.KVHeads, HeadDim: s.HeadDim, TokensPerBlock: s.TokensPerBlock, ElemBytes: s.ElemBytes}
	arr, err := executor.ParseArrival(s.Arrival)
	if err != nil {
		return c, errorf("--arrival: %v", err)
	}
	c.Workload = executor.Workload{Requests: s.Requests, InputTokens: s.Input, InputJitter: s.InputJitter, OutputTokens: s.Output, Arrival: arr, Seed: s.Seed}
	if arr.Kind == executor.Traced {
		for _, n := range []string{"input", "output", "input-jitter"} {
			if s.Set[n] {
				return c, errorf("--%s: a trace's lengths are its own: drop --%s or --arrival %s", n, n, arr)
			}
		}
		first := 0 // the whole window, unless --requests takes its first N
		if s.Set["requests"] {
			first = s.Requests
			if first < 1 {
				return c, errorf("--requests %d: must be at least 1 (the trace window's first N)", first)
			}
		}
		if c.Workload, err = executor.TraceWorkload(arr, first, s.Seed); err != nil {
			if first > 0 {
				return c, errorf("--requests %d with --arrival %s: %v", first, arr, err)
			}
			return c, errorf("--arrival: %v", err)
		}
		s.Timeout = s.Deadline(c)
	}
	if (arr.Kind == executor.Rate || arr.Kind == executor.Poisson) && s.Requests >= 1 && arr.Rate < executor.MinRate(s.Requests) {
		return c, errorf("--arrival %s with --requests %d: they would arrive over %.3g s, more than %.0g s; the rate must be at least %.3g requests/s",
			arr, s.Requests, float64(s.Requests)/arr.Rate, executor.MaxArrivalSpan.Seconds(), executor.MinRate(s.Requests))
	}
	if c.Mode, err = transceiver.ParseMode(s.Transfer); err != nil {
		return c, errorf("--transfer: %v", err)
	}
	if c.Verify, err = transceiver.ParseVerify(s.Verify); err != nil {
		return c, errorf("--verify: %v", err)
	}
	c.PrefillPerToken, c.DecodePerStep = s.PrefillPerToken, s.DecodePerStep
	c.CtxBlocks, c.GenBlocks = s.CtxBlocks, s.GenBlocks
	c.MaxBatch, c.MaxTokens, c.ChunkedPrefill = s.MaxBatch, s.MaxTokens, s.Chunked
	c.SenderWaitSlice, c.GenPollInterval, c.TransferTimeout = s.SenderWaitSlice, s.GenPollInterval, s.TransferTimeout
	c.IdleTick, c.StallTimeout = s.IdleTick, s.StallTimeout
	c.Replays = executor.ReplaySet{}
	for _, v := range s.Replays {
		for _, name := range strings.Split(v, ",") {
			if name == "" {
				return c, errorf("--replay %q: an empty name (a stray comma?)", v)
			}
			r, err := executor.ParseReplay(name)
			if err != nil {
				return c, errorf("--replay: %v", err)
			}
			c.Replays[r] = true
		}
	}
	for _, v := range s.Faults {
		ft, err := executor.ParseFault(v)
		if err != nil {
			return c, errorf("--fault: %v", err)
		}
		c.Faults = append(c.Faults, ft)
	}
	for i, v := range s.Faults {
		if err := c.ValidateFault(i); err != nil {
			return c, errorf("--fault %s: %v", v, err)
		}
	}
	if s.Timeout <= 0 {
		return c, errorf("--timeout %v: must be positive", s.Timeout)
	}
	if s.CollectiveTimeout <= 0 {
		return c, errorf("--collective-timeout %v: must be positive", s.CollectiveTimeout)
	}
	if err := s.applyModel(&c); err != nil {
		return c, err
	}
	c.Defaults()
	if err := c.Validate(); err != nil {
		return c, &Error{err: fmt.Errorf("%w", err)}
	}
	backend := s.Backend
	if backend == "auto" {
		backend = "local"
		if mpienv.Detect().UnderMPI {
			backend = "mpi"
		}
	}
	return c, s.checkSize(backend, &c)
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

// CollChecked says whether collectives run checked: the default, unless
// --unchecked or --checked=false.
func (s *Spec) CollChecked() bool { return s.Checked && !s.Unchecked }
