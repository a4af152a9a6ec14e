package executor

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/reqtrace"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// Sentinel errors.
var (
	// ErrConfig: a configuration field breaks its rule.
	ErrConfig = errors.New("executor: bad configuration")
	// ErrStalled: work is waiting but nothing has progressed for
	// StallTimeout (seed 001's symptom: the pool pinned by sends never
	// reaped, admission stopped).
	ErrStalled = errors.New("executor: stalled")
	// ErrInjected: a fault injected on purpose ended the rank.
	ErrInjected = errors.New("executor: injected fault")
)

// Defaults of the executor's own bounds (Config.Defaults).
const (
	DefaultIdleTick     = 20 * time.Millisecond
	DefaultStallTimeout = 10 * time.Second
)

// Config configures a disaggregated run: one CTX instance and one GEN
// instance (each possibly with several DP replicas).
type Config struct {
	Ctx      topology.Layout
	Gen      topology.Layout
	Model    topology.Model
	Workload Workload
	Mode     transceiver.Mode
	// Verify is how GEN checks the KV bytes it receives (full when zero).
	Verify transceiver.Verify

	// Compute cost model. Compute (nil: none) times each prefill batch and
	// decode step from the layouts and the batch; PrefillPerToken and
	// DecodePerStep, when non-zero, override it with a constant per
	// prompt token and per step. All zero: control plane only.
	Compute         Compute
	PrefillPerToken time.Duration
	DecodePerStep   time.Duration
	// Routing is the MoE model's routed experts and picks per token: a
	// layout with ep under attention-DP exchanges each step's dispatch
	// counts over its EP groups (dispatch.go), routed by it.
	Routing Routing

	// KV pool size per rank, in blocks.
	CtxBlocks int
	GenBlocks int

	// The step scheduler (0: no limit), per DP index. MaxBatch caps the
	// requests of a CTX prefill batch and of a GEN decode step (the other
	// ready requests keep their received KV for a later step); MaxTokens
	// caps the prompt tokens of a CTX prefill batch, a prompt longer than
	// it prefilled alone. ChunkedPrefill (it needs MaxTokens) fills the
	// budget instead: a prompt that does not fit what is left of it is
	// prefilled over several steps, the unfinished one first in the next
	// step, and sent once its last chunk is done. All of them act on agreed
	// values (the waiting list, the agreed admissions and receipts), so
	// every rank of a group takes the same batch without a collective.
	MaxBatch       int
	MaxTokens      int
	ChunkedPrefill bool

	SenderWaitSlice time.Duration // CTX poll bound (transceiver default 1 s)
	GenPollInterval time.Duration // GEN poll bound (transceiver default 5 s)
	TransferTimeout time.Duration // per transfer (transceiver default 60 s)
	// IdleTick bounds an idle wait between iterations (default 20 ms); an
	// arrival or a transfer event ends it sooner.
	IdleTick time.Duration
	// StallTimeout: waiting work with no progress for this long ends the
	// run with ErrStalled (default 10 s).
	StallTimeout time.Duration

	Replays ReplaySet
	Faults  []Fault

	Log *zap.Logger
	// Trace records trace events (Chrome trace format) per rank.
	Trace bool
	// Records keeps every finished request's record for Report.Requests
	// (per-request state on the GEN leaders; off by default, so a report's
	// size does not grow with the number of requests).
	Records bool
	// Sink, when set, receives the trace events (with Trace) and the
	// request records (with Records) as they happen, from every rank of
	// this process, and the rank reports keep none of them: what a run
	// holds then does not grow with its length. Nil: they are kept and
	// travel to world rank 0 with the rank reports (Report.Requests, the
	// rank reports' Trace).
	Sink Sink
	// DumpDir, when set, is where every rank whose loop ends in an error
	// (desync, timeout, stall, injected exit, interruption) writes its
	// failure dump, diag.FileName(world rank): flight recorder, guard
	// values, live sessions, pool, last decisions (DESIGN.md §12).
	DumpDir string
	// DumpStacks: every rank's dump carries the process's goroutine
	// stacks (each rank is a process of its own, under mpirun); otherwise
	// only world rank 0's does.
	DumpStacks bool
	// DumpBackend names the backend in the dumps ("local", "sim", "mpi").
	DumpBackend string
	// DumpJob names the job in the dumps, the same on every rank.
	DumpJob string
	// Clock is the time source of the run: every timestamp, timed wait
	// and modelled compute (clock.Real() when nil). Each rank of a
	// simulated world gets its own.
	Clock clock.Clock

	// routes is shared by the ranks of a run in one process (Run): the EP dispatch counts a list of tokens routes to,
	// computed once for the members that route it (routeMemo).
	routes *routeMemo
	// steps is shared likewise: the group's step times (stepMemo).
	steps *stepMemo
	// arena holds the KV pools of a run in one process (Run frees it
	// once every rank has returned); nil: the Go heap.
	arena *kvpool.Arena
}

// Defaults fills zero fields with their documented defaults.
func (c *Config) Defaults() {
	if c.Model == (topology.Model{}) {
		c.Model = topology.DefaultModel()
	}
	if c.CtxBlocks == 0 {
		c.CtxBlocks = 512
	}
	if c.GenBlocks == 0 {
		c.GenBlocks = 512
	}
	if c.IdleTick == 0 {
		c.IdleTick = DefaultIdleTick
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.SenderWaitSlice == 0 {
		c.SenderWaitSlice = transceiver.DefaultSenderWaitSlice
	}
	if c.GenPollInterval == 0 {
		c.GenPollInterval = transceiver.DefaultGenPollInterval
	}
	if c.TransferTimeout == 0 {
		c.TransferTimeout = transceiver.DefaultTransferTimeout
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	c.Clock = clock.Or(c.Clock)
	if c.Workload.Arrival.Kind == Traced && c.Workload.MaxInput == 0 {
		c.Workload.MaxInput = c.inputLimit()
	}
}

// inputLimit is the longest prompt both pools hold (what a traced
// workload's prompts are clipped to), 0 if a layout cannot shard the
// model (Validate says so).
func (c *Config) inputLimit() int {
	limit := reqtrace.MaxTokens
	for _, side := range []struct {
		l      topology.Layout
		blocks int
	}{{c.Ctx, c.CtxBlocks}, {c.Gen, c.GenBlocks}} {
		s, err := side.l.Shard(c.Model, 0)
		if err != nil {
			return 0
		}
		// The most tokens whose blocks on rank 0 (the rank that needs the
		// most, as Validate says) fit its pool.
		limit = sort.Search(limit+1, func(t int) bool { return t > 0 && s.BlocksFor(t) > side.blocks }) - 1
	}
	return max(limit, 0)
}

// Validate names the first field that breaks its rule.
func (c *Config) Validate() error {
	bad := func(field, rule string, v any) error {
		return fmt.Errorf("%w: %s = %v: %s", ErrConfig, field, v, rule)
	}
	if err := c.Ctx.Validate(); err != nil {
		return fmt.Errorf("%w: ctx layout: %w", ErrConfig, err)
	}
	if err := c.Gen.Validate(); err != nil {
		return fmt.Errorf("%w: gen layout: %w", ErrConfig, err)
	}
	if err := c.Model.Validate(); err != nil {
		return fmt.Errorf("%w: model: %w", ErrConfig, err)
	}
	if _, err := topology.Map(c.Ctx, c.Gen, c.Model); err != nil {
		return fmt.Errorf("%w: ctx %s -> gen %s: %w", ErrConfig, c.Ctx, c.Gen, err)
	}
	if err := c.Workload.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for _, side := range []struct {
		name string
		l    topology.Layout
	}{{"ctx", c.Ctx}, {"gen", c.Gen}} {
		if !needsDispatch(side.l) {
			continue
		}
		ep := side.l.Experts()
		if err := c.Routing.Validate(ep); err != nil {
			return fmt.Errorf("%w: %s layout %s dispatches tokens over %d EP parts: %w", ErrConfig, side.name, side.l, ep, err)
		}
	}
	switch {
	case c.PrefillPerToken < 0:
		return bad("prefill time per token", "must not be negative", c.PrefillPerToken)
	case c.DecodePerStep < 0:
		return bad("decode time per step", "must not be negative", c.DecodePerStep)
	case c.CtxBlocks < 1:
		return bad("ctx pool blocks", "must be at least 1", c.CtxBlocks)
	case c.GenBlocks < 1:
		return bad("gen pool blocks", "must be at least 1", c.GenBlocks)
	case c.CtxBlocks > kvpool.MaxBlocks:
		return bad("ctx pool blocks", fmt.Sprintf("must be at most %d (block ids are int32)", kvpool.MaxBlocks), c.CtxBlocks)
	case c.GenBlocks > kvpool.MaxBlocks:
		return bad("gen pool blocks", fmt.Sprintf("must be at most %d (block ids are int32)", kvpool.MaxBlocks), c.GenBlocks)
	case c.MaxBatch < 0:
		return bad("max batch", "must not be negative (0: no limit)", c.MaxBatch)
	case c.MaxTokens < 0:
		return bad("max tokens", "must not be negative (0: no limit)", c.MaxTokens)
	case c.ChunkedPrefill && c.MaxTokens == 0:
		return bad("max tokens", "must be > 0 under chunked prefill (the budget its chunks fill)", c.MaxTokens)
	case c.SenderWaitSlice < 0, c.GenPollInterval < 0, c.TransferTimeout < 0, c.IdleTick < 0, c.StallTimeout < 0:
		return bad("timeouts", "must not be negative", fmt.Sprint(c.SenderWaitSlice, c.GenPollInterval, c.TransferTimeout, c.IdleTick, c.StallTimeout))
	}
	// A request larger than a whole pool can never be admitted: reject it
	// up front rather than stall.
	maxTokens := c.Workload.maxTokens()
	for _, side := range []struct {
		name   string
		l      topology.Layout
		blocks int
	}{{"ctx", c.Ctx, c.CtxBlocks}, {"gen", c.Gen, c.GenBlocks}} {
		// The rank that needs the most is CP index 0's (it holds blocks
		// 0, CP, 2CP, ...): rank 0 stands for every rank.
		s, err := side.l.Shard(c.Model, 0)
		if err != nil {
			return fmt.Errorf("%w: %s layout %s: %w", ErrConfig, side.name, side.l, err)
		}
		if need := s.BlocksFor(maxTokens); need > side.blocks {
			return fmt.Errorf("%w: a %d-token request needs %d blocks on %s rank 0 but its pool has %d (raise --%s-blocks or lower --input)",
				ErrConfig, maxTokens, need, side.name, side.blocks, side.name)
		}
	}
	for i, f := range c.Faults {
		if err := f.validate(c); err != nil {
			return fmt.Errorf("%w: fault %d (%s): %w", ErrConfig, i+1, f, err)
		}
	}
	return nil
}

// SchedulerString is the step scheduler's limits as the report shows
// them: "max_batch=2048 max_tokens=8192", "chunked" after them under
// chunked prefill ("none" with neither limit).
func (c *Config) SchedulerString() string {
	var parts []string
	if c.MaxBatch > 0 {
		parts = append(parts, fmt.Sprintf("max_batch=%d", c.MaxBatch))
	}
	if c.MaxTokens > 0 {
		parts = append(parts, fmt.Sprintf("max_tokens=%d", c.MaxTokens))
	}
	if c.ChunkedPrefill {
		parts = append(parts, "chunked")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Ranks is the number of ranks the run needs: every CTX rank then every GEN
// rank.
func (c *Config) Ranks() int { return c.Ctx.Ranks() + c.Gen.Ranks() }
