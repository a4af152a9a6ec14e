package launch

import (
	"context"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/comm/sim"
)

// Local runs a whole world in this process, a goroutine per rank
// (comm/local): the in-process backend of executor.Run, which imports no
// backend itself.
type Local struct {
	// Checked turns checked collectives on.
	Checked bool
	// Timeout bounds every collective (comm.DefaultCollectiveTimeout
	// when 0), by the run's clock.
	Timeout time.Duration
}

// RunWorld runs rank on n goroutine ranks, each with clk, and returns the
// first rank's error once all have returned, and how long they ran by clk.
func (l Local) RunWorld(ctx context.Context, n int, clk clock.Clock, rank func(context.Context, comm.Comm, clock.Clock) error) (time.Duration, error) {
	clk = clock.Or(clk)
	start := clk.Now()
	err := local.Run(ctx, n, local.Config{Checked: l.Checked, Timeout: l.Timeout, Clock: clk}, func(ctx context.Context, c comm.Comm) error {
		return rank(ctx, c, clk)
	})
	return clock.Since(clk, start), err
}

// Sim runs a whole world in virtual time under Config (comm/sim): the
// simulation backend of executor.Run. Result holds the outcome of its last
// RunWorld (unchanged when executor.Run refused the configuration before
// it ran): its virtual duration, schedule steps and fingerprint, the
// deadlock when there was one. One Sim runs one world at a time.
type Sim struct {
	Config sim.Config
	Result sim.Result
}

// RunWorld runs rank on n simulated ranks, each with its own virtual clock
// (clk is not used: virtual time is the world's), keeps the outcome in
// s.Result, and returns its first rank's error and virtual duration.
func (s *Sim) RunWorld(ctx context.Context, n int, _ clock.Clock, rank func(context.Context, comm.Comm, clock.Clock) error) (time.Duration, error) {
	if s == nil {
		return 0, fmt.Errorf("%w: launch: a nil *Sim", comm.ErrBadArgument)
	}
	s.Result = sim.Run(ctx, n, s.Config, rank)
	return s.Result.Elapsed, s.Result.Err()
}
