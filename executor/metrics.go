package executor

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rankrun/rankrun/request"
)

// RequestRecord is the life of one request, in nanoseconds since the run's
// start (-1: did not happen; 0 is the start itself, which a simulated run
// with no modelled cost reaches).
type RequestRecord struct {
	ID           request.ID     `json:"id"`
	Tokens       int            `json:"input_tokens"`
	Output       int            `json:"output_tokens"`
	CtxDP        int            `json:"ctx_dp"`
	GenDP        int            `json:"gen_dp"`
	Arrival      int64          `json:"arrival_ns"`
	PrefillStart int64          `json:"prefill_start_ns"`
	PrefillEnd   int64          `json:"prefill_end_ns"`
	IdleArrival  bool           `json:"idle_arrival"` // arrived while its CTX group was idle
	GenAdmit     int64          `json:"gen_admit_ns"`
	TransferDone int64          `json:"transfer_done_ns"`
	FirstToken   int64          `json:"first_token_ns"`
	Done         int64          `json:"done_ns"`
	State        request.Status `json:"state"` // completed, failed, cancelled
	Reason       string         `json:"reason,omitempty"`
	Bytes        int64          `json:"bytes"`          // payload bytes the GEN leader received for it
	Verified     int64          `json:"verified_bytes"` // of which it verified
}

// TTFT is arrival to first token.
func (r RequestRecord) TTFT() time.Duration { return time.Duration(r.FirstToken - r.Arrival) }

// Handover is arrival to prefill start.
func (r RequestRecord) Handover() time.Duration { return time.Duration(r.PrefillStart - r.Arrival) }

// Dist summarises a distribution in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// DistOf summarises durations given in nanoseconds exactly (nearest rank):
// the reference a Sketch's Dist is held to.
func DistOf(ns []int64) Dist {
	if len(ns) == 0 {
		return Dist{}
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	q := func(p float64) float64 {
		// Nearest rank.
		i := int(math.Ceil(p*float64(len(s)))) - 1
		i = max(0, min(i, len(s)-1))
		return float64(s[i]) / 1e6
	}
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	return Dist{N: len(s), P50: q(0.50), P90: q(0.90), P99: q(0.99), Mean: sum / float64(len(s)) / 1e6, Max: float64(s[len(s)-1]) / 1e6}
}

// TraceEvent is one Chrome trace-format event: "X" complete events on the
// rank's own track, which nest (an iteration holds its compute and checks),
// and "b"/"e" async pairs (ID set) for what overlaps them, a transfer from
// its start to its reap, which trace viewers draw on tracks of their own.
type TraceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`           // microseconds since the start
	Dur  float64        `json:"dur"`          // microseconds ("X"; 0 otherwise)
	ID   string         `json:"id,omitempty"` // async events
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Sink receives a run's opt-in streams as they happen (Config.Sink):
// every finished request's record, from the GEN leaders, and every trace
// event, from every rank. The ranks of one process share it, so its
// methods must be safe to call from many goroutines at once. A sink that
// fails keeps its error for whoever owns it: the run does not stop for it.
type Sink interface {
	Record(RequestRecord)
	Event(TraceEvent)
}

// RankReport is what one rank measured. World rank 0 collects them.
type RankReport struct {
	WorldRank      int    `json:"world_rank"`
	Role           string `json:"role"`
	Rank           int    `json:"rank"`
	Leader         bool   `json:"leader"`
	Checked        bool   `json:"checked"` // this rank's collectives ran in checked mode
	Iterations     int    `json:"iterations"`
	IdleIterations int    `json:"idle_iterations"`
	IdleStep       Sketch `json:"idle_step_ns"`
	BusyStep       Sketch `json:"busy_step_ns"`
	ReapDelay      Sketch `json:"reap_delay_ns"`
	StatusChecks   int    `json:"status_checks"`
	IdleCheckColl  int    `json:"idle_check_collectives"` // collectives entered by idle-path status checks
	// AdmissionBlocked counts iterations in which requests waited and the
	// group agreed that none fit its pools.
	AdmissionBlocked int `json:"admission_blocked"`
	// SchedulerHeld counts iterations in which the step scheduler
	// (Config.MaxBatch, MaxTokens) held waiting requests back;
	// LargestBatch is the most requests one step computed (a CTX
	// prefill, a GEN decode step).
	SchedulerHeld int `json:"scheduler_held"`
	LargestBatch  int `json:"largest_batch"`
	// PrefillChunks counts the chunks of chunked prefill that did not end
	// their prompt (Config.ChunkedPrefill), prefilled by this rank's
	// group; only the group's leader counts them (0 on the others).
	PrefillChunks int `json:"prefill_chunks"`
	// IdleReaped counts transfers reaped by the status checks of idle
	// iterations (the idle policy's reaps, seed 001's fix among them).
	IdleReaped     int    `json:"idle_reaped"`
	Collectives    uint64 `json:"collectives"` // consensus collectives entered
	MaxPollWaitNs  int64  `json:"max_poll_wait_ns"`
	BytesSent      int64  `json:"bytes_sent"`
	BytesReceived  int64  `json:"bytes_received"`
	BytesChecked   int64  `json:"bytes_checked"`   // every byte this GEN rank checked
	BytesVerified  int64  `json:"bytes_verified"`  // checked, of requests that completed
	BytesDiscarded int64  `json:"bytes_discarded"` // received for requests that failed or were cancelled
	PoolBlocks     int    `json:"pool_blocks"`
	PeakUsed       int    `json:"peak_used"`
	PeakPinned     int    `json:"peak_pinned"`
	UsedAtEnd      int    `json:"used_at_end"`
	PinnedAtEnd    int    `json:"pinned_at_end"`
	CancelRefused  int    `json:"cancel_refused"`
	InvariantError string `json:"invariant_error,omitempty"`
	// Causes: why requests failed or were cancelled, as this rank found
	// it itself (not a peer's news), naming this rank; the lowest request
	// IDs, at most MaxNotCompleted of them.
	Causes []NotCompleted `json:"causes,omitempty"`
	// Finished tallies the requests a GEN leader finished: a size that
	// does not grow with their number.
	Finished RequestTally `json:"finished"`
	// Requests holds every finished request's record (GEN leaders), only
	// when Config.Records asks for them.
	Requests []RequestRecord `json:"requests,omitempty"`
	Trace    []TraceEvent    `json:"trace,omitempty"`
}

// RequestTally summarises finished requests: counts, the last completion
// and the distributions the report shows, all mergeable.
type RequestTally struct {
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	Cancelled int    `json:"cancelled"`
	LastDone  int64  `json:"last_done_ns"` // the latest completion (ns since the start)
	TTFT      Sketch `json:"ttft_ns"`
	TPOT      Sketch `json:"tpot_ns"` // per completed request of 2+ output tokens: (done - first token) / (output - 1)
	Handover  Sketch `json:"idle_handover_ns"`
	Transfer  Sketch `json:"transfer_ns"`
	// NotCompleted: why requests failed or were cancelled, the lowest
	// request IDs first, at most MaxNotCompleted of them (their count is
	// Failed + Cancelled; every reason is in the request records).
	NotCompleted []NotCompleted `json:"not_completed,omitempty"`
}

// MaxNotCompleted is how many failed or cancelled requests a tally (and
// the report) names with their reasons.
const MaxNotCompleted = 3

// NotCompleted is a request that failed or was cancelled, and why.
type NotCompleted struct {
	ID     request.ID     `json:"id"`
	State  request.Status `json:"state"`
	Reason string         `json:"reason"`
	// Relayed: Reason is what the GEN leader heard from a peer ("failed on
	// another rank of the group", "ctx rank 0 cancelled"); the report
	// replaces it with the cause a rank found itself where one is known
	// (RankReport.Causes).
	Relayed bool `json:"relayed,omitempty"`
}

// noteNotCompleted keeps the MaxNotCompleted lowest IDs of notes and more.
func noteNotCompleted(notes []NotCompleted, more ...NotCompleted) []NotCompleted {
	notes = append(notes, more...)
	slices.SortFunc(notes, func(a, b NotCompleted) int { return cmp.Compare(a.ID, b.ID) })
	return notes[:min(len(notes), MaxNotCompleted)]
}

// add tallies q, explained (when it did not complete) by reason, which is
// a peer's news when relayed.
func (t *RequestTally) add(q RequestRecord, reason string, relayed bool) {
	switch q.State {
	case request.Completed:
		t.Completed++
		t.TTFT.Add(q.FirstToken - q.Arrival)
		if q.Output > 1 {
			t.TPOT.Add((q.Done - q.FirstToken) / int64(q.Output-1))
		}
		t.LastDone = max(t.LastDone, q.Done)
	case request.Failed:
		t.Failed++
	case request.Cancelled:
		t.Cancelled++
	}
	if q.State == request.Failed || q.State == request.Cancelled {
		t.NotCompleted = noteNotCompleted(t.NotCompleted, NotCompleted{ID: q.ID, State: q.State, Reason: reason, Relayed: relayed})
	}
	if q.IdleArrival {
		t.Handover.Add(q.PrefillStart - q.Arrival)
	}
	if q.TransferDone >= 0 {
		t.Transfer.Add(q.TransferDone - q.PrefillEnd)
	}
}

// noteCause records why request id ended in st, as this rank found it.
func (rr *RankReport) noteCause(id request.ID, st request.Status, why string) {
	rr.Causes = noteNotCompleted(rr.Causes, NotCompleted{ID: id, State: st, Reason: rr.found(why)})
}

// found is why, as this rank found it, naming the rank.
func (rr *RankReport) found(why string) string {
	return fmt.Sprintf("%s rank %d (world rank %d) found: %s", rr.Role, rr.Rank, rr.WorldRank, why)
}

// explain replaces each relayed reason of notes (the GEN leader heard of
// the failure) with the cause a rank found itself for the same request:
// the first of causes (world rank order) that ended the request as the
// note did, else the first of any state (the CTX and GEN groups agree on a
// transfer apart). A reason the leader found itself already names it.
func explain(notes, causes []NotCompleted) {
	for i := range notes {
		if !notes[i].Relayed {
			continue
		}
		pick := -1
		for j, c := range causes {
			if c.ID != notes[i].ID {
				continue
			}
			if c.State == notes[i].State {
				pick = j
				break
			}
			if pick < 0 {
				pick = j
			}
		}
		if pick >= 0 {
			notes[i].Reason, notes[i].Relayed = causes[pick].Reason, false
		}
	}
}

func (t *RequestTally) merge(o RequestTally) {
	t.Completed += o.Completed
	t.Failed += o.Failed
	t.Cancelled += o.Cancelled
	t.LastDone = max(t.LastDone, o.LastDone)
	t.TTFT.Merge(o.TTFT)
	t.TPOT.Merge(o.TPOT)
	t.Handover.Merge(o.Handover)
	t.Transfer.Merge(o.Transfer)
	t.NotCompleted = noteNotCompleted(t.NotCompleted, o.NotCompleted...)
}

// finished accounts for a request this GEN rank finished: its bytes
// (verified only when it completed) and, on the leader, its tally and,
// when asked for, its record.
func (rr *RankReport) finished(q RequestRecord, relayed, leader, records bool, sink Sink) {
	if q.State == request.Completed {
		rr.BytesVerified += q.Verified
	} else {
		rr.BytesDiscarded += q.Bytes
	}
	if !leader {
		return
	}
	reason := q.Reason
	if !relayed && reason != "" {
		reason = rr.found(reason)
	}
	rr.Finished.add(q, reason, relayed)
	switch {
	case records && sink != nil:
		sink.Record(q)
	case records:
		rr.Requests = append(rr.Requests, q)
	}
}
