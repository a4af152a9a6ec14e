package executor

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rankrun/rankrun/topology"
)

// TestDecideProgressCoversTheDesignTable checks every row of DESIGN.md §6
// (and its GEN and termination counterparts), and every replay.
func TestDecideProgressCoversTheDesignTable(t *testing.T) {
	ctx, gen := topology.Context, topology.Generation
	replay := func(r Replay) ReplaySet { return ReplaySet{r: true} }
	for _, tc := range []struct {
		name    string
		in      ProgressInput
		check   bool
		atLeast int
		idle    bool
		scope   CheckScope
	}{
		// DESIGN.md §6, row by row (an idle iteration).
		{"async 1 rank, send in flight", ProgressInput{Role: ctx, GroupRanks: 1, SendsHeld: true}, true, 0, true, OwnScope},
		{"async 1 rank, nothing held", ProgressInput{Role: ctx, GroupRanks: 1}, true, 0, true, OwnScope},
		{"async 4 ranks, send in flight", ProgressInput{Role: ctx, GroupRanks: 4, SendsHeld: true}, true, 0, true, OwnScope},
		{"async 2 ranks, nothing held", ProgressInput{Role: ctx, GroupRanks: 2}, true, 0, true, OwnScope},
		{"sync 1 rank, send in flight: reap (seed 001)", ProgressInput{Role: ctx, Sync: true, GroupRanks: 1, SendsHeld: true}, true, 0, true, OwnScope},
		{"sync 1 rank, nothing held", ProgressInput{Role: ctx, Sync: true, GroupRanks: 1}, false, 0, false, OwnScope},
		{"sync 2 ranks, send in flight: guard", ProgressInput{Role: ctx, Sync: true, GroupRanks: 2, SendsHeld: true}, false, 0, false, OwnScope},
		{"sync 8 ranks, nothing held: guard", ProgressInput{Role: ctx, Sync: true, GroupRanks: 8}, false, 0, false, OwnScope},
		// Busy iterations.
		{"async busy: the per-iteration check", ProgressInput{Role: ctx, GroupRanks: 2, Busy: true}, true, 0, false, OwnScope},
		{"sync busy: no poll", ProgressInput{Role: ctx, Sync: true, GroupRanks: 1, Busy: true, SendsHeld: true}, false, 0, false, OwnScope},
		// Agreed points of a sync CTX.
		{"sync admission blocked: coordinated reap", ProgressInput{Role: ctx, Sync: true, GroupRanks: 4, AdmissionBlocked: true}, true, 0, false, OwnScope},
		{"sync draining: coordinated drain", ProgressInput{Role: ctx, Sync: true, GroupRanks: 4, Draining: true}, true, 0, false, OwnScope},
		{"async draining: checked already", ProgressInput{Role: ctx, GroupRanks: 4, Draining: true}, false, 0, false, OwnScope},
		// GEN.
		{"gen async idle: every iteration", ProgressInput{Role: gen, GroupRanks: 4}, true, 0, true, OwnScope},
		{"gen async busy", ProgressInput{Role: gen, GroupRanks: 4, Busy: true}, true, 0, false, OwnScope},
		{"gen sync, scope holds sessions", ProgressInput{Role: gen, Sync: true, GroupRanks: 4, ScopeHolds: true}, true, 0, true, OwnScope},
		{"gen sync, nothing held: guard", ProgressInput{Role: gen, Sync: true, GroupRanks: 4}, false, 0, false, OwnScope},
		// Replays.
		{"replay unclamped-poll: idle waits for 1", ProgressInput{Role: ctx, GroupRanks: 1, Replays: replay(UnclampedPoll)}, true, 1, true, OwnScope},
		{"replay unclamped-poll: busy unchanged", ProgressInput{Role: ctx, GroupRanks: 1, Busy: true, Replays: replay(UnclampedPoll)}, true, 0, false, OwnScope},
		{"replay no-idle-reap: no reap", ProgressInput{Role: ctx, Sync: true, GroupRanks: 1, SendsHeld: true, Replays: replay(NoIdleReap)}, false, 0, false, OwnScope},
		{"replay no-idle-reap: no coordinated reap", ProgressInput{Role: ctx, Sync: true, GroupRanks: 1, AdmissionBlocked: true, Replays: replay(NoIdleReap)}, false, 0, false, OwnScope},
		{"replay unsafe-idle-reap: locally idle", ProgressInput{Role: gen, Sync: true, GroupRanks: 2, Replays: replay(UnsafeIdleReap)}, true, 0, true, ExecutorScope},
		{"replay unsafe-idle-reap: locally busy", ProgressInput{Role: gen, Sync: true, GroupRanks: 2, BusyLocally: true, Replays: replay(UnsafeIdleReap)}, false, 0, false, OwnScope},
		{"replay blocking-outcomes: ctx waits for every send", ProgressInput{Role: ctx, GroupRanks: 4, Busy: true, SendsHeld: true, Sessions: 3, Replays: replay(BlockingOutcomes)}, true, 3, false, OwnScope},
		{"replay blocking-outcomes: gen unchanged", ProgressInput{Role: gen, GroupRanks: 4, ScopeHolds: true, Sessions: 2, Replays: replay(BlockingOutcomes)}, true, 0, true, OwnScope},
		{"replay blocking-outcomes: nothing held, nothing waits", ProgressInput{Role: ctx, GroupRanks: 1, Replays: replay(BlockingOutcomes)}, true, 0, true, OwnScope},
		{"replay blocking-outcomes: sync unchanged", ProgressInput{Role: ctx, Sync: true, GroupRanks: 1, Busy: true, SendsHeld: true, Sessions: 3, Replays: replay(BlockingOutcomes)}, false, 0, false, OwnScope},
		{"replay blocking-outcomes: async draining unchanged", ProgressInput{Role: ctx, GroupRanks: 4, Draining: true, SendsHeld: true, Sessions: 3, Replays: replay(BlockingOutcomes)}, false, 0, false, OwnScope},
		{"replay idle-max-poll: some rank idle, a busy one waits for 1", ProgressInput{Role: gen, GroupRanks: 4, Busy: true, SomeRankIdle: true, Replays: replay(IdleMaxPoll)}, true, 1, false, OwnScope},
		{"replay idle-max-poll: none idle, unchanged", ProgressInput{Role: gen, GroupRanks: 4, Busy: true, Replays: replay(IdleMaxPoll)}, true, 0, false, OwnScope},
		{"replay idle-max-poll: sync unchanged", ProgressInput{Role: gen, Sync: true, GroupRanks: 4, ScopeHolds: true, SomeRankIdle: true, Replays: replay(IdleMaxPoll)}, true, 0, true, OwnScope},
		{"replay queue-sized-collective: empty local queue skips", ProgressInput{Role: gen, GroupRanks: 2, Busy: true, Replays: replay(QueueSizedCollective)}, false, 0, false, OwnScope},
		{"replay queue-sized-collective: a queue checks", ProgressInput{Role: gen, GroupRanks: 2, Busy: true, QueueLen: 2, Replays: replay(QueueSizedCollective)}, true, 0, false, OwnScope},
		{"replay queue-sized-collective: sync unchanged", ProgressInput{Role: gen, Sync: true, GroupRanks: 2, ScopeHolds: true, Replays: replay(QueueSizedCollective)}, true, 0, true, OwnScope},
		{"replay idle-max-poll: ctx unchanged", ProgressInput{Role: ctx, GroupRanks: 4, Busy: true, SomeRankIdle: true, Replays: replay(IdleMaxPoll)}, true, 0, false, OwnScope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := DecideProgress(tc.in)
			assert.Equal(t, tc.check, a.Check, a.String())
			if a.Check {
				assert.Equal(t, tc.atLeast, a.AtLeast, a.String())
				assert.Equal(t, tc.idle, a.Idle, a.String())
				assert.Equal(t, tc.scope, a.Scope, a.String())
			}
			assert.NotEmpty(t, a.Row)
		})
	}
}

// TestDecideProgressNeverChoosesACollectiveFromLocalState is the one rule
// as a property: with no replay on, flipping any rank-local input must not
// change whether a multi-rank rank checks, over which scope, or whether it
// waits locally (which would let its peers reach the consensus first).
// Every combination of the agreed inputs is tried.
func TestDecideProgressNeverChoosesACollectiveFromLocalState(t *testing.T) {
	n := 0
	for _, role := range []topology.Role{topology.Context, topology.Generation} {
		for _, sync := range []bool{false, true} {
			for _, group := range []int{2, 4} {
				for bits := range 16 {
					in := ProgressInput{Role: role, Sync: sync, GroupRanks: group, Busy: bits&1 != 0, AdmissionBlocked: bits&2 != 0,
						Draining: bits&4 != 0, ScopeHolds: bits&8 != 0}
					base := DecideProgress(in)
					for _, flip := range []func(*ProgressInput){
						func(p *ProgressInput) { p.SendsHeld = !p.SendsHeld },
						func(p *ProgressInput) { p.BusyLocally = !p.BusyLocally },
						func(p *ProgressInput) { p.NewLocalFailures = 3 },
						func(p *ProgressInput) { p.Sessions = 5 },
					} {
						f := in
						flip(&f)
						got := DecideProgress(f)
						n++
						if got.Check != base.Check || got.Scope != base.Scope || got.AtLeast != base.AtLeast || got.ReportFailures != 0 {
							t.Errorf("%+v: a rank-local input changed %v into %v", in, base, got)
						}
					}
				}
			}
		}
	}
	assert.Equal(t, 2*2*2*16*4, n)
	// The replays are exactly what breaks the property.
	in := ProgressInput{Role: topology.Generation, Sync: true, GroupRanks: 2, Replays: ReplaySet{UnsafeIdleReap: true}}
	busy := in
	busy.BusyLocally = true
	assert.NotEqual(t, DecideProgress(in).Check, DecideProgress(busy).Check, "unsafe-idle-reap must depend on local idleness")
	lec := ProgressInput{Role: topology.Generation, GroupRanks: 2, NewLocalFailures: 2, Replays: ReplaySet{LocalErrorCollective: true}}
	assert.Equal(t, 2, DecideProgress(lec).ReportFailures, "local-error-collective reports each local failure")
	lec.GroupRanks = 1
	assert.Zero(t, DecideProgress(lec).ReportFailures, "one rank has no collective to break")
	// blocking-outcomes: how long a rank waits before the consensus comes
	// from what it alone holds (whether it checks does not).
	bo := ProgressInput{Role: topology.Context, GroupRanks: 2, Replays: ReplaySet{BlockingOutcomes: true}}
	held := bo
	held.Sessions = 2
	assert.Equal(t, DecideProgress(bo).Check, DecideProgress(held).Check)
	assert.NotEqual(t, DecideProgress(bo).AtLeast, DecideProgress(held).AtLeast, "blocking-outcomes must wait on local sessions")
}

func TestDecideAdmission(t *testing.T) {
	ctx, gen := topology.Context, topology.Generation
	for _, tc := range []struct {
		name  string
		in    AdmissionInput
		want  AdmissionAction
		valid string
	}{
		{"single rank admits its fit", AdmissionInput{Role: ctx, GroupRanks: 1, Needs: []int{3, 3, 3}, Free: 7}, AdmissionAction{LocalFit: 2}, ""},
		{"group agrees", AdmissionInput{Role: ctx, GroupRanks: 2, Needs: []int{3, 3, 3}, Free: 7}, AdmissionAction{LocalFit: 2, Agree: true}, ""},
		{"group agrees on nothing fitting too", AdmissionInput{Role: gen, GroupRanks: 4, Needs: []int{9}, Free: 7}, AdmissionAction{Agree: true}, ""},
		{"nothing waits: no collective", AdmissionInput{Role: ctx, GroupRanks: 4, Free: 7}, AdmissionAction{}, ""},
		{"a request held elsewhere needs nothing here", AdmissionInput{Role: ctx, GroupRanks: 2, Needs: []int{0, 0, 5}, Free: 4}, AdmissionAction{LocalFit: 2, Agree: true}, ""},
		{"replay gate: nothing fits, reap first", AdmissionInput{Role: ctx, GroupRanks: 2, Needs: []int{9}, Free: 7, Replays: ReplaySet{LocalAdmissionGate: true}},
			AdmissionAction{ReapFirst: true}, ""},
		{"replay gate: something fits, no agreement", AdmissionInput{Role: ctx, GroupRanks: 2, Needs: []int{3}, Free: 7, Replays: ReplaySet{LocalAdmissionGate: true}},
			AdmissionAction{LocalFit: 1}, ""},
		{"replay gate is CTX only", AdmissionInput{Role: gen, GroupRanks: 2, Needs: []int{9}, Free: 7, Replays: ReplaySet{LocalAdmissionGate: true}},
			AdmissionAction{Agree: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, DecideAdmission(tc.in))
		})
	}
	// Without the replay, a multi-rank group with waiting requests always
	// agrees, whatever this rank's own pool says (the one rule).
	for free := range 12 {
		a := DecideAdmission(AdmissionInput{Role: ctx, GroupRanks: 3, Needs: []int{4, 4}, Free: free})
		assert.True(t, a.Agree, "free %d", free)
		assert.False(t, a.ReapFirst, "free %d", free)
	}
	assert.Equal(t, 3, localFit([]int{1, 0, 2, 9}, 3))
	assert.Equal(t, 0, localFit(nil, 3))
}

// The step scheduler's cap on a CTX waiting list: a FIFO prefix within
// max_batch requests and a prompt-token budget per DP index, the budget
// always admitting a DP index's first prompt (alone when it passes it).
func TestScheduleCap(t *testing.T) {
	for _, tc := range []struct {
		name                string
		dps                 []int
		tokens              []int64
		maxBatch, maxTokens int
		want                int
	}{
		{"no limit", []int{0, 0, 0}, []int64{100, 200, 300}, 0, 0, 3},
		{"nothing waits", nil, nil, 4, 100, 0},
		{"max batch", []int{0, 0, 0, 0, 0}, []int64{1, 1, 1, 1, 1}, 3, 0, 3},
		{"max batch per DP index", []int{0, 1, 0, 1, 0, 1}, []int64{1, 1, 1, 1, 1, 1}, 2, 0, 4},
		{"a full index stops the prefix", []int{0, 0, 1, 1}, []int64{1, 1, 1, 1}, 1, 0, 1},
		{"budget exact", []int{0, 0, 0}, []int64{40, 60, 10}, 0, 100, 2},
		{"budget", []int{0, 0, 0}, []int64{40, 61, 10}, 0, 100, 1},
		{"budget per DP index", []int{0, 1, 0, 1}, []int64{60, 60, 40, 40}, 0, 100, 4},
		{"long first prompt alone", []int{0, 0}, []int64{500, 10}, 0, 100, 1},
		{"long first prompt of another index", []int{0, 1, 0}, []int64{10, 500, 10}, 0, 100, 3},
		{"both: batch tighter", []int{0, 0, 0, 0}, []int64{10, 10, 10, 10}, 2, 100, 2},
		{"both: budget tighter", []int{0, 0, 0}, []int64{60, 60, 60}, 3, 100, 1},
	} {
		assert.Equal(t, tc.want, scheduleCap(tc.dps, tc.tokens, tc.maxBatch, tc.maxTokens), tc.name)
	}
}

// A GEN step decodes the first max_batch ready requests of each DP index.
func TestDecodeCap(t *testing.T) {
	DecodeCap := func(dps []int, maxBatch int, in []bool) []bool {
		in, _ = decodeCap(dps, maxBatch, in, nil)
		return in
	}
	assert.Equal(t, []bool{true, true, true}, DecodeCap([]int{0, 0, 1}, 0, nil), "no limit")
	assert.Equal(t, []bool{true, true, false, false, true, false}, DecodeCap([]int{0, 1, 0, 1, 2, 2}, 1, nil), "one per index")
	assert.Equal(t, []bool{true, true, false, true}, DecodeCap([]int{0, 0, 0, 1}, 2, make([]bool, 9)), "a reused buffer")
}

// Chunked prefill fills each DP index's budget: the unfinished prompts
// first, each up to its rest, then the waiting ones in order while their
// index has budget left (and a place under max_batch), the last of them
// taking what is left.
func TestChunkPlan(t *testing.T) {
	for _, tc := range []struct {
		name                string
		contDPs             []int
		contLeft            []int64
		dps                 []int
		tokens              []int64
		maxBatch, maxTokens int
		want                stepPlan
	}{
		{"nothing", nil, nil, nil, nil, 0, 100, stepPlan{Cont: []int64{}}},
		{"whole prompts that fit", nil, nil, []int{0, 0}, []int64{40, 60}, 0, 100, stepPlan{Cont: []int64{}, New: []int64{40, 60}}},
		{"the last is cut", nil, nil, []int{0, 0, 0}, []int64{40, 70, 10}, 0, 100, stepPlan{Cont: []int64{}, New: []int64{40, 60}}},
		{"a long first prompt", nil, nil, []int{0, 0}, []int64{250, 10}, 0, 100, stepPlan{Cont: []int64{}, New: []int64{100}}},
		{"unfinished first, all of the budget", []int{0}, []int64{150}, []int{0}, []int64{10}, 0, 100, stepPlan{Cont: []int64{100}}},
		{"unfinished ends, then the waiting", []int{0}, []int64{30}, []int{0, 0}, []int64{50, 50}, 0, 100, stepPlan{Cont: []int64{30}, New: []int64{50, 20}}},
		{"a spent index stops the prefix", []int{1}, []int64{500}, []int{0, 1, 0}, []int64{60, 5, 60}, 0, 100,
			stepPlan{Cont: []int64{100}, New: []int64{60}}},
		{"per DP index, the other has room", []int{1}, []int64{500}, []int{0, 0, 1}, []int64{60, 60, 5}, 0, 100,
			stepPlan{Cont: []int64{100}, New: []int64{60, 40}}},
		{"a spent index gives no chunk", []int{0, 0}, []int64{100, 50}, nil, nil, 0, 100, stepPlan{Cont: []int64{100, 0}}},
		{"max batch counts the unfinished", []int{0}, []int64{10}, []int{0, 0, 0}, []int64{10, 10, 10}, 2, 100,
			stepPlan{Cont: []int64{10}, New: []int64{10}}},
	} {
		assert.Equal(t, tc.want, chunkPlan(tc.contDPs, tc.contLeft, tc.dps, tc.tokens, tc.maxBatch, tc.maxTokens), tc.name)
	}
}

// A step's chunks dispatch each token at its own position in its prompt:
// a chunk of n after past is positions [past, past+n).
func TestChunkSpans(t *testing.T) {
	batch := []chunk{{r: rec{ID: 3, Tokens: 10, CtxDP: 1}, past: 7, n: 3}, {r: rec{ID: 4, Tokens: 5}, n: 2}}
	assert.Equal(t, []dispatchSpan{{ID: 3, Pos: 7, N: 3, DP: 1}, {ID: 4, Pos: 0, N: 2}},
		chunkSpans(batch, make([]dispatchSpan, 9)))
}
