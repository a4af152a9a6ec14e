package sweep

import (
	"context"
	"runtime"
	"slices"
	"sync"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
)

// Runner runs repeat i of a cell: cfg is the cell's Config with the
// repeat's workload seed (the cell's plus i) and the SLO tally as its
// Sink. A runner that seeds anything else (a simulation's schedule) should
// advance it by i too. It returns the run's report (nil when there is
// none) and error.
type Runner func(ctx context.Context, cfg executor.Config, i int) (*executor.Report, error)

// Options are how Run runs the cells.
type Options struct {
	// Jobs is how many repeats run at once; 0 (or less) means one per
	// CPU (GOMAXPROCS), which suits simulation. Runs whose wall-clock figures
	// matter (in-process) should run one at a time.
	Jobs int
	// SLO counts each repeat's requests that meet it (Cell.Met).
	SLO goodput.SLO
	// Done, when set, is called after each repeat, from the goroutine that
	// ran it: it must be safe for concurrent use, and may read repeat i of
	// c (Reports[i], Errs[i], Met[i], Ran[i]) but nothing else of it:
	// other repeats of c may be running, and Stats and Summary are set
	// only after every repeat has ended.
	Done func(c *Cell, i int)
}

// Run runs every repeat of every cell, opt.Jobs at a time, and fills each
// cell's reports, errors, SLO counts, statistics and summary. It returns
// the cells whose every repeat ran to its end (a cell with no repeat
// never does): all of them, unless ctx ends first, when no repeat starts
// any more, those running see ctx end, and a repeat that returns an error
// after ctx ended counts as cut short (one that returns no error counts).
// Compute goodputs and rankings from what Run returns, not from cells: a
// cell cut short holds no result.
// A cell's reports keep no per-rank reports (Ranks_), so that a large
// sweep holds what its outputs print and no more.
func Run(ctx context.Context, cells []*Cell, opt Options, run Runner) []*Cell {
	type task struct {
		c *Cell
		i int
	}
	var tasks []task
	for _, c := range cells {
		// A hand-made cell gets its per-repeat slices here.
		n := len(c.Reports)
		c.Errs, c.Met, c.Ran = resize(c.Errs, n), resize(c.Met, n), resize(c.Ran, n)
		clear(c.Ran)
		for i := range c.Reports {
			tasks = append(tasks, task{c, i})
		}
	}
	jobs := opt.Jobs
	if jobs <= 0 {
		jobs = runtime.GOMAXPROCS(0)
	}
	next := make(chan task)
	var wg sync.WaitGroup
	for range min(jobs, len(tasks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range next {
				// The dispatcher's select may hand over a task as ctx
				// ends (Go picks among ready cases at random): none
				// starts after that.
				if ctx.Err() != nil {
					continue
				}
				runRepeat(ctx, t.c, t.i, opt.SLO, run)
				if opt.Done != nil {
					opt.Done(t.c, t.i)
				}
			}
		}()
	}
dispatch:
	for _, t := range tasks {
		select {
		case next <- t:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(next)
	wg.Wait()
	var done []*Cell
	for _, c := range cells {
		if len(c.Ran) == 0 || slices.Contains(c.Ran, false) {
			continue
		}
		c.Stats = make([]Stats, len(c.Reports))
		for i, rep := range c.Reports {
			c.Stats[i] = StatsOf(rep, c.Met[i], c.FailedAt(i), c.GPUs(), c.Config.Workload.Requests)
		}
		c.Summary = Summarise(c.Stats)
		done = append(done, c)
	}
	return done
}

// resize is s with n elements: s itself when it has n.
func resize[T any](s []T, n int) []T {
	if len(s) == n {
		return s
	}
	return make([]T, n)
}

// runRepeat runs repeat i of c, counting the requests that meet s.
func runRepeat(ctx context.Context, c *Cell, i int, s goodput.SLO, run Runner) {
	cfg := c.Config
	tally := &Tally{SLO: s}
	cfg.Records, cfg.Sink = true, tally // each record is counted and dropped
	cfg.Workload.Seed += uint64(i)
	rep, err := run(ctx, cfg, i)
	if rep == nil {
		rep = FailedReport(&cfg, err)
	}
	rep.Ranks_ = nil
	c.Reports[i], c.Errs[i], c.Met[i] = rep, err, tally.Met()
	// A repeat that ctx's end cut short is not a result.
	c.Ran[i] = err == nil || ctx.Err() == nil
}
