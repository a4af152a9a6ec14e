package executor

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rankrun/rankrun/internal/units"
)

// Report is the outcome of a run. Its JSON field names are stable: scripts
// depend on them (see docs/cli.md, "JSON report").
type Report struct {
	// Backend ran the job: local, mpi or sim. Under sim every time figure
	// is virtual and the report is the same for the same seed; the only
	// host-dependent fields are named wall_*.
	Backend     string   `json:"backend"`
	Sim         *SimInfo `json:"sim,omitempty"`
	WallSeconds float64  `json:"wall_seconds"`
	// WallPeakRSS is the peak resident memory of the process that wrote
	// the report (under MPI, world rank 0's), in bytes; 0 where unknown.
	// Host-dependent like wall_seconds.
	WallPeakRSS int64  `json:"wall_peak_rss_bytes"`
	Ctx         string `json:"ctx"`
	Gen         string `json:"gen"`
	Ranks       int    `json:"ranks"`
	Mode        string `json:"transfer_mode"`
	Verify      string `json:"verify"`
	Checked     bool   `json:"checked"` // collectives ran in checked mode (the CLI's default)
	Workload    string `json:"workload"`
	// Trace is the replayed production trace, its window and length
	// distribution; omitted for a synthetic workload.
	Trace   *TraceReport `json:"trace,omitempty"`
	Compute string       `json:"compute,omitempty"` // the compute cost model, "" with none
	// Scheduler is the step scheduler's limits (Config.MaxBatch,
	// MaxTokens): "max_batch=2048 max_tokens=8192", "none" without.
	Scheduler string `json:"scheduler"`
	Replays   string `json:"replays"`
	// ReplayNotes: for each replay this run cannot show, what it lacks and
	// a run that shows it (ReplayNotes); omitted when none.
	ReplayNotes []string `json:"replay_notes,omitempty"`
	Faults      []string `json:"faults"`
	DurationS   float64  `json:"duration_s"`
	// CompletionS is the start to the last completion: the interval of
	// ThroughputRPS (throughput_rps x completion_s == requests_completed).
	CompletionS       float64 `json:"completion_s"`
	RequestsCompleted int     `json:"requests_completed"`
	RequestsFailed    int     `json:"requests_failed"`
	RequestsCancelled int     `json:"requests_cancelled"`
	// NotCompleted names the first failed or cancelled requests (the
	// lowest IDs, at most MaxNotCompleted) and why; omitted when none.
	NotCompleted      []NotCompleted `json:"not_completed,omitempty"`
	ThroughputRPS     float64        `json:"throughput_rps"`
	TTFTMs            Dist           `json:"ttft_ms"`
	TPOTMs            Dist           `json:"tpot_ms"` // time per output token after the first, per completed request
	IdleHandoverMs    Dist           `json:"idle_handover_ms"`
	IdleStepMs        Dist           `json:"idle_step_ms"`
	BusyStepMs        Dist           `json:"busy_step_ms"`
	ReapDelayMs       Dist           `json:"reap_delay_ms"`
	TransferMs        Dist           `json:"transfer_ms"`
	BytesMoved        int64          `json:"bytes_moved"`
	BytesVerified     int64          `json:"bytes_verified"`
	BytesDiscarded    int64          `json:"bytes_discarded"`
	Collectives       uint64         `json:"collectives"`
	IdleCollectives   int            `json:"idle_check_collectives"`
	LeakedBlocks      int            `json:"leaked_blocks"`
	PinnedBlocksAtEnd int            `json:"pinned_blocks_at_end"`
	// InUseAtEnd: the blocks still allocated when a run that ended early
	// (Error set) stopped. They were in use, not leaked: a leak is what
	// outlives a run that ran to its end (LeakedBlocks).
	InUseAtEnd int `json:"in_use_blocks_at_end"`
	// MissingRanks: under MPI, the world ranks whose partial reports never
	// reached world rank 0 after an interrupt (killed, crashed or frozen
	// first); their figures are not in the report. CountsPartial says when
	// the request counts are a lower bound for it (a GEN leader missing).
	MissingRanks  []int  `json:"missing_ranks,omitempty"`
	CountsPartial string `json:"counts_partial,omitempty"`
	// KVSample: the run carried 1/KVSample of each KV head's elements
	// (rankrun --kv-sample; 1: every byte, 0: not set). The byte counts are
	// what was carried; the links were charged for all of them.
	KVSample  int              `json:"kv_sample"`
	Instances []InstanceReport `json:"instances"`
	Errors    []string         `json:"errors"`
	// Error is why the run ended early (nil: it ran to its end); the
	// figures are then what the ranks measured up to it.
	Error *RunError `json:"error"`
	// Requests: every request's record, only with Config.Records (the CLI
	// writes them to --requests-out as JSON Lines, never into the report).
	Requests []RequestRecord `json:"-"`
	Ranks_   []RankReport    `json:"rank_reports,omitempty"`
}

// SimInfo is how a simulated run was scheduled: the seed, strategy and link
// model that reproduce it, and what the scheduler did.
type SimInfo struct {
	Seed     uint64 `json:"seed"`
	Strategy string `json:"strategy"`
	Hardware string `json:"hardware"`
	Steps    int    `json:"steps"`    // scheduling decisions
	Schedule string `json:"schedule"` // fingerprint of the choices made
}

// InstanceReport summarises one side.
type InstanceReport struct {
	Role           string  `json:"role"`
	Layout         string  `json:"layout"`
	Ranks          int     `json:"ranks"`
	PoolBlocks     int     `json:"pool_blocks_per_rank"`
	PeakKVUtil     float64 `json:"peak_kv_util"`
	PeakPinnedUtil float64 `json:"peak_pinned_util"`
	Iterations     int     `json:"iterations"`
	IdleIterations int     `json:"idle_iterations"`
	StatusChecks   int     `json:"status_checks"`
	MaxPollWaitMs  float64 `json:"max_poll_wait_ms"`
	CancelRefused  int     `json:"cancel_refused"`
	// AdmissionBlocked: iterations in which requests waited and none fit
	// (the most of any rank).
	AdmissionBlocked int `json:"admission_blocked_iterations"`
	// SchedulerHeld: iterations in which the step scheduler held waiting
	// requests back; LargestBatch: the most requests one step computed
	// (the most of any rank, both).
	SchedulerHeld int `json:"scheduler_held_iterations"`
	LargestBatch  int `json:"largest_batch"`
	// PrefillChunks: chunks of chunked prefill that did not end their
	// prompt (every executor group's, each counted once).
	PrefillChunks int `json:"prefill_chunks"`
	// IdleCollectives: collectives entered by status checks of idle
	// iterations, over the instance's ranks.
	IdleCollectives int `json:"idle_check_collectives"`
	// IdleReaped: transfers reaped by status checks of idle iterations.
	IdleReaped        int   `json:"idle_reaped"`
	BytesSent         int64 `json:"bytes_sent"`
	BytesReceived     int64 `json:"bytes_received"`
	BytesVerified     int64 `json:"bytes_verified"`
	UsedBlocksAtEnd   int   `json:"used_blocks_at_end"`
	PinnedBlocksAtEnd int   `json:"pinned_blocks_at_end"`
}

// add folds one rank's report into its instance's.
func (ir *InstanceReport) add(rr RankReport) {
	if rr.PoolBlocks > 0 { // 0: the rank failed before it had a pool
		ir.PeakKVUtil = max(ir.PeakKVUtil, float64(rr.PeakUsed)/float64(rr.PoolBlocks))
		ir.PeakPinnedUtil = max(ir.PeakPinnedUtil, float64(rr.PeakPinned)/float64(rr.PoolBlocks))
	}
	ir.Iterations = max(ir.Iterations, rr.Iterations)
	ir.IdleIterations = max(ir.IdleIterations, rr.IdleIterations)
	ir.StatusChecks += rr.StatusChecks
	ir.MaxPollWaitMs = max(ir.MaxPollWaitMs, float64(rr.MaxPollWaitNs)/1e6)
	ir.CancelRefused += rr.CancelRefused
	ir.AdmissionBlocked = max(ir.AdmissionBlocked, rr.AdmissionBlocked)
	ir.SchedulerHeld = max(ir.SchedulerHeld, rr.SchedulerHeld)
	ir.LargestBatch = max(ir.LargestBatch, rr.LargestBatch)
	ir.PrefillChunks += rr.PrefillChunks // counted by each group's leader
	ir.IdleCollectives += rr.IdleCheckColl
	ir.IdleReaped += rr.IdleReaped
	ir.BytesSent += rr.BytesSent
	ir.BytesReceived += rr.BytesReceived
	ir.BytesVerified += rr.BytesVerified
	ir.UsedBlocksAtEnd += rr.UsedAtEnd
	ir.PinnedBlocksAtEnd += rr.PinnedAtEnd
}

func buildReport(cfg *Config, reps []RankReport, elapsed time.Duration) *Report {
	tr := TraceSummary(cfg)
	r := &Report{Ctx: cfg.Ctx.String(), Gen: cfg.Gen.String(), Ranks: cfg.Ranks(), Mode: cfg.Mode.String(), Verify: cfg.Verify.String(),
		Workload: workloadLine(cfg, tr), Trace: tr,
		Scheduler: cfg.SchedulerString(), Replays: cfg.Replays.String(), ReplayNotes: ReplayNotes(cfg), Faults: []string{}, Errors: []string{}}
	for _, rr := range reps {
		r.Checked = r.Checked || rr.Checked
	}
	for _, f := range cfg.Faults {
		r.Faults = append(r.Faults, f.String())
	}
	var idleStep, busyStep, reap Sketch
	var done RequestTally
	var causes []NotCompleted
	for _, role := range []string{"ctx", "gen"} {
		l, blocks := cfg.Ctx, cfg.CtxBlocks
		if role == "gen" {
			l, blocks = cfg.Gen, cfg.GenBlocks
		}
		r.Instances = append(r.Instances, InstanceReport{Role: role, Layout: l.String(), Ranks: l.Ranks(), PoolBlocks: blocks})
	}
	inst := map[string]*InstanceReport{"ctx": &r.Instances[0], "gen": &r.Instances[1]}
	for _, rr := range reps {
		if in := inst[rr.Role]; in != nil {
			in.add(rr)
		}
		r.BytesMoved += rr.BytesSent
		r.BytesVerified += rr.BytesVerified
		r.BytesDiscarded += rr.BytesDiscarded
		r.Collectives += rr.Collectives
		r.IdleCollectives += rr.IdleCheckColl
		r.LeakedBlocks += rr.UsedAtEnd
		r.PinnedBlocksAtEnd += rr.PinnedAtEnd
		if rr.Role == "ctx" {
			idleStep.Merge(rr.IdleStep)
		}
		busyStep.Merge(rr.BusyStep)
		reap.Merge(rr.ReapDelay)
		if rr.InvariantError != "" {
			r.Errors = append(r.Errors, fmt.Sprintf("world rank %d: %s", rr.WorldRank, rr.InvariantError))
		}
		done.merge(rr.Finished)
		causes = append(causes, rr.Causes...)
		r.Requests = append(r.Requests, rr.Requests...)
		rr.Requests = nil // they travel once, in r.Requests
		r.Ranks_ = append(r.Ranks_, rr)
	}
	slices.SortFunc(r.Requests, func(a, b RequestRecord) int { return cmp.Compare(a.ID, b.ID) })
	r.RequestsCompleted, r.RequestsFailed, r.RequestsCancelled = done.Completed, done.Failed, done.Cancelled
	explain(done.NotCompleted, causes)
	r.NotCompleted = done.NotCompleted
	if n := r.RequestsFailed + r.RequestsCancelled; n > 0 && len(cfg.Faults) == 0 {
		// Nobody asked for failures: they are errors of the run.
		r.Errors = append(r.Errors, fmt.Sprintf("%d requests failed or were cancelled with no fault injected", n))
	}
	if r.LeakedBlocks > 0 {
		r.Errors = append(r.Errors, r.leakLine())
	}
	r.DurationS = elapsed.Seconds()
	if done.LastDone > 0 {
		r.CompletionS = float64(done.LastDone) / 1e9
		r.ThroughputRPS = float64(r.RequestsCompleted) / r.CompletionS
	}
	r.TTFTMs, r.IdleHandoverMs, r.IdleStepMs = done.TTFT.Dist(), done.Handover.Dist(), idleStep.Dist()
	r.TPOTMs = done.TPOT.Dist()
	r.BusyStepMs, r.ReapDelayMs, r.TransferMs = busyStep.Dist(), reap.Dist(), done.Transfer.Dist()
	return r
}

func (r *Report) leakLine() string {
	return fmt.Sprintf("%d KV blocks still allocated at the end (%d pinned)", r.LeakedBlocks, r.PinnedBlocksAtEnd)
}

// cutShort marks r, the report of a run that ended on an error, as cut
// short when some of its requests never finished: the blocks still
// allocated were in use when it stopped (InUseAtEnd), not leaked. When
// every request finished (the error came at the end: a transfer session
// or a message left over, a broken invariant), what is still allocated
// outlived its requests: a leak.
func (r *Report) cutShort(requests int) {
	if r.LeakedBlocks == 0 || r.RequestsCompleted+r.RequestsFailed+r.RequestsCancelled >= requests {
		return
	}
	line := r.leakLine()
	r.Errors = slices.DeleteFunc(r.Errors, func(e string) bool { return e == line })
	r.InUseAtEnd, r.LeakedBlocks = r.InUseAtEnd+r.LeakedBlocks, 0
}

// OK reports whether the run ended clean: no error (a request that failed
// or was cancelled without an injected fault is one), nothing leaked or
// pinned, invariants held.
func (r *Report) OK() bool {
	return r.Error == nil && len(r.Errors) == 0 && r.LeakedBlocks == 0 && r.PinnedBlocksAtEnd == 0
}

// WriteText renders the human-readable report.
func (r *Report) WriteText(w io.Writer) {
	collectives := "unchecked"
	if r.Checked {
		collectives = "checked"
	}
	fmt.Fprintf(w, "rankrun: ctx %s -> gen %s, %d ranks, %s transfer, verify %s, %s collectives", r.Ctx, r.Gen, r.Ranks, r.Mode, r.Verify, collectives)
	if r.Sim != nil {
		fmt.Fprintf(w, ", simulated (seed %d, %s schedule, %s links; every time is virtual; %.2f s of wall time)",
			r.Sim.Seed, r.Sim.Strategy, r.Sim.Hardware, r.WallSeconds)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "workload: %s; scheduler: %s; replays: %s", r.Workload, r.Scheduler, r.Replays)
	if len(r.Faults) > 0 {
		fmt.Fprintf(w, "; faults: %s", strings.Join(r.Faults, " "))
	}
	if r.Compute != "" {
		fmt.Fprintf(w, "\ncompute: %s", r.Compute)
	}
	for _, n := range r.ReplayNotes {
		fmt.Fprintf(w, "\nnote: %s", n)
	}
	fmt.Fprintf(w, "\n\n")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "requests\t%d completed, %d failed, %d cancelled; the last completed at %.3f s of a %.3f s run",
		r.RequestsCompleted, r.RequestsFailed, r.RequestsCancelled, r.CompletionS, r.DurationS)
	if r.CountsPartial != "" {
		fmt.Fprintf(tw, " (%s)", r.CountsPartial)
	}
	fmt.Fprintln(tw)
	for i, q := range r.NotCompleted {
		fmt.Fprintf(tw, "not completed\trequest %d %s: %s\n", q.ID, q.State, q.Reason)
		if more := r.RequestsFailed + r.RequestsCancelled - len(r.NotCompleted); i == len(r.NotCompleted)-1 && more > 0 {
			fmt.Fprintf(tw, "\tand %d more failed or cancelled (--requests-out has every request's reason)\n", more)
		}
		if i == len(r.NotCompleted)-1 && r.CountsPartial != "" {
			fmt.Fprintf(tw, "\t(of the GEN leaders that reported: the first of all may be missing)\n")
		}
	}
	fmt.Fprintf(tw, "throughput\t%.1f requests/s (%d completed / %.3f s)\n", r.ThroughputRPS, r.RequestsCompleted, r.CompletionS)
	d := func(name string, x Dist) {
		if x.N == 0 {
			fmt.Fprintf(tw, "%s\t(no samples)\n", name)
			return
		}
		fmt.Fprintf(tw, "%s\tp50 %s  p90 %s  p99 %s  max %s  (n=%d)\n", name, ms(x.P50), ms(x.P90), ms(x.P99), ms(x.Max), x.N)
	}
	d("TTFT", r.TTFTMs)
	d("TPOT", r.TPOTMs)
	d("idle handover", r.IdleHandoverMs)
	d("idle host step (ctx)", r.IdleStepMs)
	d("transfer (prefill end -> agreed)", r.TransferMs)
	d("reap delay", r.ReapDelayMs)
	fmt.Fprintf(tw, "KV bytes\t%s moved, %s verified (of completed requests)", units.Bytes(r.BytesMoved), units.Bytes(r.BytesVerified))
	if len(r.MissingRanks) > 0 {
		fmt.Fprintf(tw, ", by the ranks that reported (not world ranks %v)", r.MissingRanks)
	}
	if r.BytesDiscarded > 0 {
		fmt.Fprintf(tw, ", %s discarded (of failed or cancelled ones)", units.Bytes(r.BytesDiscarded))
	}
	if r.KVSample > 1 {
		// The counts are the bytes carried; the run modelled KVSample
		// times as many, and charged the links for all of them.
		fmt.Fprintf(tw, "; sampled 1/%d: %s modelled, the links charged for all of it", r.KVSample, units.Bytes(r.BytesMoved*int64(r.KVSample)))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "collectives\t%d consensus collectives (%d by idle checks)\n", r.Collectives, r.IdleCollectives)
	for _, in := range r.Instances {
		fmt.Fprintf(tw, "%s %s\tpeak KV %.1f%%, peak pinned %.1f%% of %d blocks/rank; %d iterations (%d idle); max poll wait %s; largest batch %d",
			in.Role, in.Layout, 100*in.PeakKVUtil, 100*in.PeakPinnedUtil, in.PoolBlocks, in.Iterations, in.IdleIterations, ms(in.MaxPollWaitMs), in.LargestBatch)
		if in.SchedulerHeld > 0 {
			fmt.Fprintf(tw, " (the scheduler held requests back in %d iterations)", in.SchedulerHeld)
		}
		if in.PrefillChunks > 0 {
			fmt.Fprintf(tw, " (%d unfinished prefill chunks)", in.PrefillChunks)
		}
		fmt.Fprintln(tw)
	}
	if r.InUseAtEnd > 0 {
		fmt.Fprintf(tw, "leaked blocks\t%d (in use when the run ended early: %d, pinned: %d)\n", r.LeakedBlocks, r.InUseAtEnd, r.PinnedBlocksAtEnd)
	} else {
		fmt.Fprintf(tw, "leaked blocks\t%d (pinned at end: %d)\n", r.LeakedBlocks, r.PinnedBlocksAtEnd)
	}
	if r.WallPeakRSS > 0 {
		fmt.Fprintf(tw, "host\t%.2f s of wall time, peak RSS %s (this process)\n", r.WallSeconds, units.Bytes(r.WallPeakRSS))
	}
	if len(r.Errors) == 0 && r.Error == nil {
		fmt.Fprintf(tw, "errors\tnone\n")
	}
	tw.Flush()
	for _, e := range r.Errors {
		if r.Error != nil && (e == r.Error.Message || strings.HasPrefix(e, "world rank ") && strings.HasSuffix(e, ": "+r.Error.Message)) {
			continue // the error line below says it
		}
		fmt.Fprintf(w, "error: %s\n", e)
	}
	if r.Error != nil {
		fmt.Fprintf(w, "%s: %s (figures up to then)\n", r.Error.Kind, r.Error.Message)
	}
}

func ms(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.0fus", v*1000)
	case v < 100:
		return fmt.Sprintf("%.2fms", v)
	}
	return fmt.Sprintf("%.0fms", v)
}
