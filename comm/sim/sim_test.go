package sim_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/commtest"
	"github.com/rankrun/rankrun/comm/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type launcher struct{ seed uint64 }

func (launcher) Sizes() []int { return []int{1, 2, 3, 4, 8} }

func (l launcher) Launch(ctx context.Context, n int, o commtest.Options, fn commtest.RankFunc) error {
	// The suite's timeout cases park a rank in a receive nobody answers and
	// expect the others' collective to time out: without the detector,
	// as on every backend. (The detector reports that state at once;
	// TestDeadlockDetector shows it.)
	cfg := sim.Config{Seed: l.seed, Checked: o.Checked, Timeout: o.Timeout, NoDeadlockDetection: true}
	res := sim.Run(ctx, n, cfg, func(ctx context.Context, c comm.Comm, _ clock.Clock) error {
		return fn(ctx, c)
	})
	return errors.Join(res.Errs...)
}

func (launcher) OneGoroutinePerRank() bool { return true }

// The conformance suite every backend passes, under several schedules.
func TestConformance(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run("seed="+string(rune('0'+seed)), func(t *testing.T) { commtest.Run(t, launcher{seed: seed}) })
	}
}
