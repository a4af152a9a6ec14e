package executor_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// The step scheduler under the sim backend (virtual time: exact). A burst
// of 16 requests of 40 prompt tokens, prefill 1 ms a token: with no limit
// CTX prefills what has arrived in one batch (12, then 4); a 160-token
// budget prefills 4 at a time, in four waves of 160 ms, so the first
// tokens start 160 ms sooner, and the report says the scheduler held
// requests back. max_batch 3 caps a CTX batch and every GEN decode step,
// per DP index. CTX tp=2 (a group of two), GEN tp=2,dp=2 (two groups),
// then one GEN group fed by two CTX groups, and attention-DP.
func TestSchedulerLimits(t *testing.T) {
	base := baseConfig("tp=2", "tp=2,dp=2", transceiver.Async)
	base.Workload.Requests, base.Workload.InputTokens, base.Workload.InputJitter = 16, 40, 0
	base.Workload.OutputTokens = 6
	base.Workload.Arrival = executor.Arrival{Kind: executor.Burst}
	base.PrefillPerToken, base.DecodePerStep = time.Millisecond, time.Millisecond
	base.Records = true
	sc := sim.Config{Seed: 3, Checked: true}
	runSim := func(cfg executor.Config) *executor.Report {
		rep, _, err := runSim(t.Context(), cfg, sc)
		require.NoError(t, err)
		require.True(t, rep.OK(), "%v", rep.Errors)
		require.Equal(t, 16, rep.RequestsCompleted)
		return rep
	}
	free := runSim(base)
	assert.Equal(t, "none", free.Scheduler)
	assert.Equal(t, 12, free.Instances[0].LargestBatch, "no limit: what has arrived is one prefill")
	assert.Zero(t, free.Instances[0].SchedulerHeld)

	capped := base
	capped.MaxTokens, capped.MaxBatch = 160, 3
	rep := runSim(capped)
	assert.Equal(t, "max_batch=3 max_tokens=160", rep.Scheduler)
	ctx, gen := rep.Instances[0], rep.Instances[1]
	assert.Equal(t, 3, ctx.LargestBatch, "max_batch caps a CTX batch below the budget's 4")
	assert.Positive(t, ctx.SchedulerHeld)
	assert.LessOrEqual(t, gen.LargestBatch, 3, "a GEN step decodes at most max_batch of a DP index")

	// GEN's own cap: two CTX groups (dp=2) of 3-request batches feed one
	// GEN group (tp=2), which would decode 6 at once; max_batch keeps its
	// steps at 3 (the rest wait, their KV received) and says it held
	// requests back.
	two := capped
	two.Ctx = topology.MustParseLayout("dp=2")
	two.Gen = topology.MustParseLayout("tp=2")
	g := runSim(two).Instances[1]
	assert.Equal(t, 3, g.LargestBatch, "one GEN group at max_batch 3")
	assert.Positive(t, g.SchedulerHeld, "GEN held requests back")
	uncapped := two
	uncapped.MaxBatch = 0
	u := runSim(uncapped)
	assert.Greater(t, u.Instances[1].LargestBatch, 3, "without max_batch the GEN group decodes more")
	// A step costs 1 ms whatever its batch: the capped run's requests wait
	// for steps, so it ends later.
	assert.Greater(t, runSim(two).CompletionS, u.CompletionS, "held requests decode in later steps")

	// Per DP index under attention-DP: one GEN group of two indices, each
	// fed more than 2 requests at once (200 decode steps each), decodes
	// 2 of each a step, 4 in all.
	adp := base
	adp.Ctx, adp.Gen = topology.MustParseLayout("dp=2"), topology.MustParseLayout("dp=2,adp")
	adp.MaxBatch, adp.Workload.OutputTokens = 2, 200
	a := runSim(adp).Instances[1]
	assert.Equal(t, 4, a.LargestBatch, "max_batch 2 per DP index, two indices")
	assert.Positive(t, a.SchedulerHeld)

	// A request left out of a step keeps its received KV and its place: a
	// decode lifetime far past the transfer timeout loses no request
	// (the cap acts on decode steps, not on admission, so no transfer
	// waits behind it).
	long := base
	long.Gen = topology.MustParseLayout("tp=2,dp=2,adp")
	long.MaxBatch, long.Workload.OutputTokens = 1, 60
	long.DecodePerStep, long.TransferTimeout = 100*time.Millisecond, 2*time.Second
	l := runSim(long)
	assert.Zero(t, l.RequestsFailed+l.RequestsCancelled)

	budget := base
	budget.MaxTokens = 160
	b := runSim(budget)
	assert.Equal(t, 4, b.Instances[0].LargestBatch, "160 tokens: 4 prompts of 40")
	// Four waves of four prompts, 160 ms apart; the first tokens of the
	// first wave come out a wave sooner than with one large batch.
	waves := map[int64]int{}
	for _, r := range b.Requests {
		waves[r.PrefillEnd]++
	}
	assert.Len(t, waves, 4, "prefill ends %v", waves)
	for end, n := range waves {
		assert.Equal(t, 4, n, "the wave ending at %v", time.Duration(end))
	}
	first := func(rep *executor.Report) int64 {
		out := rep.Requests[0].FirstToken
		for _, r := range rep.Requests {
			out = min(out, r.FirstToken)
		}
		return out
	}
	assert.Less(t, first(b), first(free)-int64(150*time.Millisecond), "the first token: %v (budget) vs %v (none)",
		time.Duration(first(b)), time.Duration(first(free)))
}

// A request that has started decoding is never paused for one admitted
// before it whose KV arrived later: under max_batch 1, with four CTX groups
// of jittered prompts and jittered messages feeding one GEN rank (receipts
// out of admission order), every request's tokens come one step apart,
// its first token to its last exactly (output-1) steps. Found by a review:
// taking the first ready requests in admission order paused request 3 for
// 220 steps.
func TestDecodeCapKeepsRunningRequests(t *testing.T) {
	for _, seed := range []uint64{1, 3, 4} {
		cfg := baseConfig("dp=4", "tp=1", transceiver.Async)
		cfg.Workload.Requests, cfg.Workload.InputJitter, cfg.Workload.OutputTokens, cfg.Workload.Seed = 32, 0.9, 20, seed
		cfg.Workload.Arrival = executor.Arrival{Kind: executor.Burst}
		cfg.PrefillPerToken, cfg.DecodePerStep, cfg.MaxBatch, cfg.Records = 10*time.Microsecond, 10*time.Millisecond, 1, true
		rep, _, err := runSim(t.Context(), cfg, sim.Config{Seed: seed, Checked: true, Jitter: 20 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, rep.OK(), "%v", rep.Errors)
		require.Len(t, rep.Requests, 32)
		for _, r := range rep.Requests {
			assert.Equal(t, time.Duration(r.Output-1)*cfg.DecodePerStep, time.Duration(r.Done-r.FirstToken), "seed %d: request %d", seed, r.ID)
		}
	}
}

// Chunked prefill under the sim backend (virtual time: exact). A burst of
// three 2500-token prompts, prefill 1 us a token, decode 1 ms a step, a
// 1000-token budget. Without chunks each prompt prefills alone: prefill
// ends at 2.5, 5 and 7.5 ms. With them every step fills the budget, the
// unfinished prompt first: A 1000, A 1000, A 500 + B 500, B 1000, B 1000,
// C 1000, C 1000, C 500, so A's KV leaves at 3 ms (sharing its last step
// with B's first), B's at 5 and C's at 7.5, each only after its last chunk,
// and six chunks did not end their prompt. The first token is one decode
// step after the prefill (the transfer costs nothing on zero links). On a
// CTX group of two (tp=2) and under attention-DP with an index each
// (dp=2,adp: two prompts on index 0, one on 1, so index 1's prompt runs
// its chunks beside index 0's).
func TestChunkedPrefill(t *testing.T) {
	base := baseConfig("tp=1", "tp=2", transceiver.Async)
	base.Workload.Requests, base.Workload.InputTokens, base.Workload.InputJitter = 3, 2500, 0
	base.Workload.OutputTokens = 2
	base.Workload.Arrival = executor.Arrival{Kind: executor.Burst}
	base.PrefillPerToken, base.DecodePerStep = time.Microsecond, time.Millisecond
	base.CtxBlocks, base.GenBlocks, base.Records = 2048, 2048, true
	base.MaxTokens = 1000
	ms := func(v float64) int64 { return int64(v * float64(time.Millisecond)) }
	runSim := func(cfg executor.Config) *executor.Report {
		rep, _, err := runSim(t.Context(), cfg, sim.Config{Seed: 2, Checked: true})
		require.NoError(t, err)
		require.True(t, rep.OK(), "%v", rep.Errors)
		require.Equal(t, cfg.Workload.Requests, rep.RequestsCompleted)
		require.Equal(t, rep.BytesMoved, rep.BytesVerified)
		return rep
	}
	ends := func(rep *executor.Report) (prefill, first []int64) {
		for _, r := range rep.Requests {
			prefill, first = append(prefill, r.PrefillEnd), append(first, r.FirstToken-r.Arrival)
		}
		slices.Sort(prefill)
		slices.Sort(first)
		return prefill, first
	}
	for _, ctxL := range []string{"tp=1", "tp=2"} {
		cfg := base
		cfg.Ctx = topology.MustParseLayout(ctxL)
		whole := runSim(cfg)
		p, f := ends(whole)
		assert.Equal(t, []int64{ms(2.5), ms(5), ms(7.5)}, p, "%s: whole prompts", ctxL)
		assert.Equal(t, []int64{ms(3.5), ms(6), ms(8.5)}, f, "%s: whole prompts", ctxL)
		assert.Zero(t, whole.Instances[0].PrefillChunks)

		cfg.ChunkedPrefill = true
		chunked := runSim(cfg)
		assert.Equal(t, "max_tokens=1000 chunked", chunked.Scheduler)
		p, f = ends(chunked)
		assert.Equal(t, []int64{ms(3), ms(5), ms(7.5)}, p, "%s: chunked", ctxL)
		assert.Equal(t, []int64{ms(4), ms(6), ms(8.5)}, f, "%s: chunked", ctxL)
		assert.Equal(t, 6, chunked.Instances[0].PrefillChunks)
		assert.Equal(t, 2, chunked.Instances[0].LargestBatch, "A's last chunk beside B's first")
		assert.Zero(t, chunked.Instances[0].AdmissionBlocked, "a budget spent on an unfinished prompt is no admission block")
		var starts []int64
		for _, r := range chunked.Requests {
			starts = append(starts, r.PrefillStart)
		}
		slices.Sort(starts)
		assert.Equal(t, []int64{0, ms(2), ms(5)}, starts, "%s: a prompt's prefill starts with its first chunk", ctxL)
	}

	// Two CTX executor groups (dp=2, not attention-DP): A and C on one,
	// B on the other, each filling its own budget; the instance counts
	// both groups' unfinished chunks (2 + 2 and 2).
	two := base
	two.Ctx, two.ChunkedPrefill = topology.MustParseLayout("dp=2"), true
	assert.Equal(t, 6, runSim(two).Instances[0].PrefillChunks, "both groups' chunks")

	// A prompt whose chunks take longer than the stall timeout is
	// progress, not a stall: nothing is admitted behind it and no send is
	// in flight while it prefills, 10 chunks of 100 ms under a 250 ms
	// stall timeout.
	long := base
	long.Workload.Requests, long.Workload.InputTokens = 2, 1000
	long.PrefillPerToken, long.MaxTokens, long.ChunkedPrefill, long.StallTimeout = time.Millisecond, 100, true, 250*time.Millisecond
	assert.Equal(t, 18, runSim(long).Instances[0].PrefillChunks, "9 unfinished chunks of each prompt, and no stall")

	// Attention-DP: requests A and C on index 0, B on index 1 (the
	// router's round robin), each index its own budget, one step for
	// both (PrefillPerToken charges the step's tokens over both): A 1000
	// + B 1000, again, A 500 + C 500 + B 500 (A and B end at 5.5 ms),
	// C 1000, C 1000 (7.5 ms).
	adp := base
	adp.Ctx, adp.ChunkedPrefill = topology.MustParseLayout("dp=2,adp"), true
	rep := runSim(adp)
	p, _ := ends(rep)
	assert.Equal(t, []int64{ms(5.5), ms(5.5), ms(7.5)}, p, "attention-DP, chunked")
	assert.Equal(t, 6, rep.Instances[0].PrefillChunks, "two chunks of each prompt did not end it")
	assert.Equal(t, 3, rep.Instances[0].LargestBatch, "A's last chunk, C's first and B's last")
}

// Chunked prefill in process (real goroutine ranks, checked collectives,
// under -race) and in simulation, on groups whose ranks must all take the
// same chunks: TP and PP groups, CP, attention-DP with EP dispatch (each
// chunk's tokens dispatched at their own positions), jittered prompts of
// 20 to 60 tokens under a 24-token budget, so most prompts span steps and
// steps mix an unfinished prompt's end with new prompts' beginnings.
func TestChunkedPrefillAgrees(t *testing.T) {
	for _, l := range [][2]string{{"tp=2", "tp=2"}, {"tp=2,pp=2", "tp=1"}, {"cp=2", "dp=2"}, {"dp=2,ep=2,adp", "dp=2,ep=2,adp"}} {
		t.Run(l[0]+"->"+l[1], func(t *testing.T) {
			cfg := dispatchConfig(l[0], l[1])
			if !strings.Contains(l[0]+l[1], "ep=") {
				cfg.Routing = executor.Routing{}
			}
			cfg.Workload.InputJitter, cfg.MaxTokens, cfg.ChunkedPrefill = 0.5, 24, true
			rep := run(t, cfg)
			require.True(t, rep.OK(), "%v", rep.Errors)
			require.Equal(t, 12, rep.RequestsCompleted)
			require.Equal(t, rep.BytesMoved, rep.BytesVerified)
			assert.Positive(t, rep.Instances[0].PrefillChunks, "prompts spanned steps")
			srep, _, err := runSim(t.Context(), cfg, sim.Config{Seed: 5, Checked: true, Jitter: 50 * time.Microsecond})
			require.NoError(t, err)
			require.Equal(t, 12, srep.RequestsCompleted)
			require.True(t, srep.OK(), "%v", srep.Errors)
			assert.Positive(t, srep.Instances[0].PrefillChunks, "prompts spanned steps (sim)")
		})
	}
}

// A Compute model sees each chunk with the tokens before it and whether
// it ends its prompt.
func TestChunkedPrefillCompute(t *testing.T) {
	cfg := baseConfig("tp=1", "tp=1", transceiver.Async)
	cfg.Workload.Requests, cfg.Workload.InputTokens, cfg.Workload.InputJitter, cfg.Workload.OutputTokens = 1, 2500, 0, 2
	cfg.Workload.Arrival = executor.Arrival{Kind: executor.Burst}
	cfg.CtxBlocks, cfg.GenBlocks, cfg.MaxTokens, cfg.ChunkedPrefill = 2048, 2048, 1000, true
	rc := &recordingCompute{}
	cfg.Compute = rc
	rep, _, err := runSim(t.Context(), cfg, sim.Config{Seed: 1, Checked: true})
	require.NoError(t, err)
	require.Equal(t, 1, rep.RequestsCompleted)
	assert.Equal(t, []executor.Seq{{Tokens: 1000, Partial: true}, {Tokens: 1000, Past: 1000, Partial: true}, {Tokens: 500, Past: 2000}}, rc.prefills)
}

// recordingCompute keeps every prefill batch's requests (one CTX rank
// here) and costs nothing.
type recordingCompute struct {
	mu       sync.Mutex
	prefills []executor.Seq
}

func (c *recordingCompute) Prefill(batch []executor.Seq) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prefills = append(c.prefills, batch...)
	return time.Millisecond
}

func (c *recordingCompute) Decode([]executor.Seq) time.Duration { return time.Millisecond }

// Chunked prefill without a token budget is refused by name.
func TestChunkedPrefillNeedsABudget(t *testing.T) {
	cfg := baseConfig("tp=1", "tp=1", transceiver.Async)
	cfg.ChunkedPrefill = true
	cfg.Defaults()
	require.ErrorContains(t, cfg.Validate(), "max tokens = 0: must be > 0 under chunked prefill")
}
