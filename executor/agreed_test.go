package executor_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/scenario"
	"github.com/rankrun/rankrun/topology"
)

// Every rank of a group acts on the values the group agreed, not on its
// own, in states where the two differ and the difference changes what a
// rank does: one rank's pool is shrunk (the first, a middle or the last of
// a group of four, on either side), so the agreed admission fit is that
// rank's and every other rank's own fit is larger. A rank that admitted by
// its own fit (tools/mutate's agreed-admission-* mutants, one per rank
// position) would take requests its peers did not: their next collectives
// differ, or its blocks leak. Under attention-DP the GEN ranks agree on
// how each transfer ended (the outcome set) over the executor group, while
// each reports its own scope's outcomes: a rank that decided on its own
// reports (agreed-outcomes-* mutants) decodes a request its peers still
// wait for, with a transfer failing on a GEN rank at each position. Under
// attention-DP with EP, each step's prefill or decode batch is the
// group's: a rank that dispatched only its own DP index's tokens
// (agreed-prefill-batch-*, agreed-decode-batch-*) sends counts its peers
// do not expect. Under chunked prefill the step's schedule (which prompts,
// how many of their tokens) is computed alike from agreed inputs: a rank
// that planned by a token budget of its own (agreed-schedule-*) prefills
// other chunks, and its next admission differs.
func TestEveryRankActsOnTheAgreedValues(t *testing.T) {
	type tc struct {
		name          string
		ctx, gen      string
		fault         string
		completed, ok int
		chunked       bool
	}
	var cases []tc
	for _, role := range []string{"ctx", "gen"} {
		for _, pos := range []int{0, 2, 3} {
			cases = append(cases, tc{name: fmt.Sprintf("admission/%s:%d shrunk", role, pos), ctx: "tp=4", gen: "tp=4",
				fault: fmt.Sprintf("shrink-pool@%s:%d,blocks=8", role, pos), completed: 24})
		}
	}
	// gen tp=2,dp=2,adp: ranks 0..3 of one executor group, DP index 0 on
	// ranks 0-1 and 1 on ranks 2-3; request r goes to DP index (r-1)%2.
	for pos, req := range map[int]int{0: 3, 2: 4, 3: 6} {
		cases = append(cases, tc{name: fmt.Sprintf("outcomes/gen:%d fails one", pos), ctx: "tp=2", gen: "tp=2,dp=2,adp",
			fault: fmt.Sprintf("fail-transfer@gen:%d,req=%d", pos, req), completed: 23})
	}
	// The step's batch under attention-DP with EP: every rank dispatches
	// the tokens of the whole agreed batch (its DP indices' queues are
	// uneven: three requests in flight over four DP indices), not its own.
	cases = append(cases,
		tc{name: "prefill-batch/ctx dp=4,ep=4,adp", ctx: "dp=4,ep=4,adp", gen: "tp=1", completed: 24},
		tc{name: "decode-batch/gen dp=4,ep=4,adp", ctx: "tp=1", gen: "dp=4,ep=4,adp", completed: 24},
		// The step scheduler's plan under chunked prefill: every rank of a
		// CTX group prefills the agreed chunks of the agreed prompts.
		tc{name: "schedule/ctx tp=4 chunked", ctx: "tp=4", gen: "tp=1", completed: 24, chunked: true})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := scenario.New(c.name)
			s.Ctx, s.Gen, s.Transfer = c.ctx, c.gen, "async"
			s.Routing = topology.Routing{Experts: 8, TopK: 2}
			s.Arrival = "closed=3"
			s.Requests, s.Input, s.Output = 24, 64, 2
			if c.chunked {
				s.Chunked, s.MaxTokens, s.Input = true, 48, 100 // prompts of 100 tokens, 48 a step
			}
			s.CtxBlocks, s.GenBlocks = 64, 64
			if c.fault != "" {
				s.Faults = []string{c.fault}
			}
			cfg, err := s.Config(false)
			require.NoError(t, err)
			for seed := uint64(1); seed <= 3; seed++ {
				sc, err := s.SimConfig()
				require.NoError(t, err)
				sc.Seed = seed
				rep, _, err := runSim(t.Context(), cfg, sc)
				require.NoError(t, err, "seed %d", seed)
				require.True(t, rep.OK(), "seed %d: %v", seed, rep.Errors)
				require.Equal(t, c.completed, rep.RequestsCompleted, "seed %d", seed)
				require.Zero(t, rep.LeakedBlocks, "seed %d", seed)
			}
		})
	}
}
