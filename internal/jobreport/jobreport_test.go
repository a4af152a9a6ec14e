package jobreport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/jobreport"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// baseConfig is a small run of the given layouts: what Collect needs of it
// is the layout (who is a GEN leader) and the request count.
func baseConfig(ctx, gen string, mode transceiver.Mode) executor.Config {
	return executor.Config{
		Ctx: topology.MustParseLayout(ctx), Gen: topology.MustParseLayout(gen), Mode: mode,
		Model:     topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2},
		Workload:  executor.Workload{Requests: 24, InputTokens: 40, OutputTokens: 3, Arrival: executor.Arrival{Kind: executor.Closed, Concurrency: 4}, Seed: 1},
		CtxBlocks: 64, GenBlocks: 64, StallTimeout: 5 * time.Second,
	}
}

// After an interrupt, world rank 0 gathers the other ranks' partial
// reports; a rank that sends none (killed before mpirun's SIGTERM, as with
// kill -9) is named in the error, and when it is a GEN leader the request
// counts say they are a lower bound. Each position: the GEN leader, a GEN
// member, a CTX rank.
func TestCollectNamesMissingRanks(t *testing.T) {
	cfg := baseConfig("tp=2", "tp=2,dp=2", transceiver.Async) // world: ctx 0,1; gen 2,3 (dp 0), 4,5 (dp 1)
	for _, c := range []struct {
		missing     int
		leader      bool
		description string
	}{
		{2, true, "the GEN leader of dp index 0"},
		{5, false, "the last GEN rank, not a leader"},
		{1, false, "a CTX rank"},
		{4, true, "the GEN leader of dp index 1"},
	} {
		t.Run(c.description, func(t *testing.T) {
			var rep *executor.Report
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := local.Run(ctx, cfg.Ranks(), local.Config{}, func(ctx context.Context, w comm.Comm) error {
				mine := executor.RankReport{WorldRank: w.Rank(), Finished: executor.RequestTally{Completed: 1}}
				switch w.Rank() {
				case 0:
					// The missing rank is waited for this long: the others send at
					// once, so it bounds how long a loaded host may starve them.
					bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
					defer bcancel()
					var done func(context.Context)
					rep, done = jobreport.Collect(bctx, w, cfg, mine, fmt.Errorf("rankrun: %w", executor.ErrInterrupted), time.Second, 2*time.Second)
					done(ctx)
				case c.missing: // killed: sends nothing
				default:
					return jobreport.SendPartial(ctx, w, mine)
				}
				return nil
			})
			require.NoError(t, err)
			require.NotNil(t, rep)
			assert.Equal(t, []int{c.missing}, rep.MissingRanks)
			require.NotNil(t, rep.Error)
			assert.Equal(t, "interrupted", rep.Error.Kind)
			assert.Equal(t, []int{c.missing}, rep.Error.Ranks)
			assert.Contains(t, rep.Error.Message, fmt.Sprintf("world ranks [%d] sent no partial report", c.missing))
			assert.Contains(t, rep.Error.Message, "did not answer within 2s", "the wait it was given is named")
			if c.leader {
				assert.Contains(t, rep.CountsPartial, fmt.Sprintf("a lower bound: GEN leader world ranks [%d]", c.missing))
			} else {
				assert.Empty(t, rep.CountsPartial)
			}
			assert.Contains(t, rep.Errors, rep.Error.Message, "the error line is the error's")
		})
	}
}

// The partial-report exchange runs under the sim backend too, where a rank
// may block only through its communicator and clock and start no
// goroutines that use them (comm/sim's rule): every rank reports, and
// world rank 0 hears from each of them.
func TestCollectUnderSim(t *testing.T) {
	cfg := baseConfig("tp=1", "tp=2", transceiver.Async) // world: ctx 0; gen 1, 2
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rep *executor.Report
	res := sim.Run(ctx, cfg.Ranks(), sim.Config{Seed: 1}, func(ctx context.Context, w comm.Comm, _ clock.Clock) error {
		mine := executor.RankReport{WorldRank: w.Rank(), Finished: executor.RequestTally{Completed: 1}}
		if w.Rank() != 0 {
			return jobreport.SendPartial(ctx, w, mine)
		}
		var done func(context.Context)
		rep, done = jobreport.Collect(ctx, w, cfg, mine, fmt.Errorf("rankrun: %w", executor.ErrInterrupted), time.Second, time.Second)
		done(ctx)
		return nil
	})
	require.Equal(t, -1, res.First, "%v", res.Errs)
	require.NotNil(t, rep)
	assert.Empty(t, rep.MissingRanks)
	require.NotNil(t, rep.Error)
	assert.Equal(t, "interrupted", rep.Error.Kind)
	assert.Empty(t, rep.CountsPartial)
}

// A rank that fails sends its error to world rank 0 before it aborts the
// job; world rank 0, interrupted by the teardown, reports that error and
// that rank, not the interrupt. Each position: a CTX rank, a GEN leader,
// the last GEN rank.
func TestCollectNamesTheFailingRanksError(t *testing.T) {
	cfg := baseConfig("tp=2", "tp=2,dp=2", transceiver.Async) // world: ctx 0,1; gen 2,3 (dp 0), 4,5 (dp 1)
	for _, failing := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("world rank %d", failing), func(t *testing.T) {
			var rep *executor.Report
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := local.Run(ctx, cfg.Ranks(), local.Config{}, func(ctx context.Context, w comm.Comm) error {
				mine := executor.RankReport{WorldRank: w.Rank(), Finished: executor.RequestTally{Completed: 1}}
				switch w.Rank() {
				case 0:
					bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
					defer bcancel()
					var done func(context.Context)
					rep, done = jobreport.Collect(bctx, w, cfg, mine, fmt.Errorf("rankrun: %w", executor.ErrInterrupted), time.Second, 2*time.Second)
					done(ctx)
				case failing:
					return jobreport.SendFailure(ctx, w, fmt.Errorf("the disk is on fire: %w", executor.ErrInjected))
				default:
					return jobreport.SendPartial(ctx, w, mine)
				}
				return nil
			})
			require.NoError(t, err)
			require.NotNil(t, rep)
			require.NotNil(t, rep.Error)
			assert.Equal(t, executor.ErrorKind(executor.ErrInjected), rep.Error.Kind, "the failing rank's kind, not the interrupt's")
			assert.Equal(t, "the disk is on fire: "+executor.ErrInjected.Error(), rep.Error.Message)
			assert.Equal(t, []int{failing}, rep.Error.Ranks)
			assert.Equal(t, []int{failing}, rep.MissingRanks, "it sent no partial report")
			assert.Contains(t, rep.Errors, fmt.Sprintf("world rank %d: the disk is on fire: %s", failing, executor.ErrInjected))
		})
	}
}
