package runspec

import (
	"context"
	"fmt"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/launch"
)

// Simulate runs cfg (Config's, with what the caller adds: a log, records,
// a sink) on the simulation backend, every rank in this process in
// virtual time, and returns its report marked with the simulation's seed,
// strategy, link model and schedule. A run that fails returns what it
// measured up to its error, with the error.
func (s *Spec) Simulate(ctx context.Context, cfg executor.Config) (*executor.Report, error) {
	sc, err := s.SimConfig()
	if err != nil {
		return nil, err
	}
	w := &launch.Sim{Config: sc}
	rep, err := executor.Run(ctx, cfg, w)
	if rep != nil {
		rep.Sim = &executor.SimInfo{Seed: sc.Seed, Strategy: sc.Strategy.String(), Hardware: sc.Fabric.Name,
			Steps: w.Result.Steps, Schedule: fmt.Sprintf("%016x", w.Result.Schedule)}
	}
	return rep, err
}
