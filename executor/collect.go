package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/internal/pieces"
)

// collect sends every rank's report to world rank 0, which merges them. A
// report's summary is small and bounded (sketches, counters), but the
// opt-in parts (trace events, request records) grow with the run: they
// travel in pieces (internal/pieces).
func collect(ctx context.Context, world, ctl comm.Comm, cfg *Config, rep RankReport, t0 time.Time) (*Report, error) {
	if world.Rank() != 0 {
		b, err := json.Marshal(rep)
		if err != nil {
			return nil, err
		}
		return nil, pieces.Send(ctx, ctl, 0, b, tagReport, tagChunk)
	}
	reps := []RankReport{rep}
	for range world.Size() - 1 {
		src, b, err := pieces.Recv(ctx, ctl, comm.AnySource, tagReport, tagChunk)
		if err != nil {
			return nil, fmt.Errorf("executor: collecting rank reports: %w", err)
		}
		var r RankReport
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("executor: report of world rank %d: %w", src, err)
		}
		reps = append(reps, r)
	}
	slices.SortFunc(reps, func(a, b RankReport) int { return a.WorldRank - b.WorldRank })
	return buildReport(cfg, reps, clock.Since(cfg.Clock, t0)), nil
}
