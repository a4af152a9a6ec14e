package runspec

import (
	"context"
	"fmt"
	"slices"
	"strings"

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

// SimulateLine runs a `rankrun run` flag line in simulation (--backend sim
// is given first; the line may not change it) and returns its report and,
// with records, its request records by id: for tables of runs written as
// what a user would type (perf cases, seed tables). A run that ends on an
// error still returns its report, with the error in it.
func SimulateLine(line string, records bool) (*executor.Report, []executor.RequestRecord, error) {
	spec, err := Parse(append([]string{"--backend", "sim"}, strings.Fields(line)...))
	if err != nil {
		return nil, nil, fmt.Errorf("rankrun run %s: %w", line, err)
	}
	if spec.Backend != "sim" {
		return nil, nil, fmt.Errorf("rankrun run %s: --backend %s: a line runs in simulation", line, spec.Backend)
	}
	cfg, err := spec.Config()
	if err != nil {
		return nil, nil, fmt.Errorf("rankrun run %s: %w", line, err)
	}
	cfg.Records = records
	rep, err := spec.Simulate(context.Background(), cfg)
	if rep == nil {
		return nil, nil, fmt.Errorf("rankrun run %s: no report: %w", line, err)
	}
	recs := slices.Clone(rep.Requests)
	slices.SortFunc(recs, func(a, b executor.RequestRecord) int { return int(a.ID) - int(b.ID) })
	return rep, recs, nil
}
