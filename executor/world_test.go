package executor_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"

	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/launch"
)

// runLocal runs cfg in this process, a goroutine per rank.
func runLocal(ctx context.Context, cfg executor.Config, checked bool, timeout time.Duration) (*executor.Report, error) {
	return executor.Run(ctx, cfg, launch.Local{Checked: checked, Timeout: timeout})
}

// runSim runs cfg in virtual time under sc and returns the simulation's
// outcome beside the report.
func runSim(ctx context.Context, cfg executor.Config, sc sim.Config) (*executor.Report, sim.Result, error) {
	w := &launch.Sim{Config: sc}
	rep, err := executor.Run(ctx, cfg, w)
	return rep, w.Result, err
}

// A simulated deadlock is named as one in a run's report, though executor
// imports no backend: the simulator's error says its kind itself.
func TestErrorKindNamesASimulatedDeadlock(t *testing.T) {
	res := sim.Run(context.Background(), 2, sim.Config{Seed: 1}, func(ctx context.Context, c comm.Comm, _ clock.Clock) error {
		q, err := c.Irecv(make([]byte, 1), 1-c.Rank(), 7) // both receive, nobody sends
		if err != nil {
			return err
		}
		_, err = q.Wait(ctx)
		return err
	})
	err := res.Err()
	require.ErrorIs(t, err, sim.ErrDeadlock)
	assert.Equal(t, "deadlock", executor.ErrorKind(fmt.Errorf("executor: gen loop: %w", err)))
	assert.Equal(t, "deadlock", executor.NewRunError(err, []int{0}).Kind)
	assert.Equal(t, "error", executor.ErrorKind(errors.New("sim: deadlock, in words only")))
}
