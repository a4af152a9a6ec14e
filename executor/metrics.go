package executor

import (
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
	Bytes        int64          `json:"bytes"`
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

// DistOf summarises durations given in nanoseconds.
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

// TraceEvent is one Chrome trace-format event ("X" complete events).
type TraceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`  // microseconds since the start
	Dur  float64        `json:"dur"` // microseconds
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// RankReport is what one rank measured. World rank 0 collects them.
type RankReport struct {
	WorldRank      int     `json:"world_rank"`
	Role           string  `json:"role"`
	Rank           int     `json:"rank"`
	Leader         bool    `json:"leader"`
	Iterations     int     `json:"iterations"`
	IdleIterations int     `json:"idle_iterations"`
	IdleStepNs     []int64 `json:"idle_step_ns,omitempty"`
	BusyStepNs     []int64 `json:"busy_step_ns,omitempty"`
	ReapDelayNs    []int64 `json:"reap_delay_ns,omitempty"`
	StatusChecks   int     `json:"status_checks"`
	IdleCheckColl  int     `json:"idle_check_collectives"` // collectives entered by idle-path status checks
	// AdmissionBlocked counts iterations in which requests waited and the
	// group agreed that none fit its pools.
	AdmissionBlocked int `json:"admission_blocked"`
	// IdleReaped counts transfers reaped by the status checks of idle
	// iterations (the idle policy's reaps, seed 001's fix among them).
	IdleReaped     int             `json:"idle_reaped"`
	Collectives    uint64          `json:"collectives"` // consensus collectives entered
	MaxPollWaitNs  int64           `json:"max_poll_wait_ns"`
	BytesSent      int64           `json:"bytes_sent"`
	BytesReceived  int64           `json:"bytes_received"`
	BytesVerified  int64           `json:"bytes_verified"`
	PoolBlocks     int             `json:"pool_blocks"`
	PeakUsed       int             `json:"peak_used"`
	PeakPinned     int             `json:"peak_pinned"`
	UsedAtEnd      int             `json:"used_at_end"`
	PinnedAtEnd    int             `json:"pinned_at_end"`
	CancelRefused  int             `json:"cancel_refused"`
	InvariantError string          `json:"invariant_error,omitempty"`
	Requests       []RequestRecord `json:"requests,omitempty"` // GEN leaders: the requests they finished
	Trace          []TraceEvent    `json:"trace,omitempty"`
}
