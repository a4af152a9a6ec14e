package transceiver

import (
	"time"

	"github.com/rankrun/rankrun/request"
)

// State is a session's state (DESIGN.md §5).
type State uint8

// Session states.
const (
	StateInit         State = iota // waiting for peer info
	StateReady                     // peer info known
	StateTransferring              // bytes moving
	StateTransferred               // delivered and acknowledged (terminal)
	StateFailed                    // terminal
	StateCancelled                 // terminal
)

func (s State) String() string {
	return [...]string{"init", "ready", "transferring", "transferred", "failed", "cancelled"}[s]
}

func (s State) terminal() bool { return s >= StateTransferred }

// status is the request status a terminal session state reports.
func (s State) status() request.Status {
	switch s {
	case StateTransferred:
		return request.Completed
	case StateFailed:
		return request.Failed
	case StateCancelled:
		return request.Cancelled
	}
	return request.Pending
}

// Reaped describes a transfer whose end the group agreed on.
type Reaped struct {
	ID     request.ID
	Status request.Status // how the group agreed the transfer ended
	Reason string         // why it failed or was cancelled
	// Relayed: Reason is a peer's news (it names the peer, or says the
	// group agreed it), not a cause this rank found; the rank that found
	// one reaps the same request with Relayed false.
	Relayed  bool
	Bytes    int64 // payload bytes this rank moved for it
	Verified int64 // payload bytes this rank verified (GEN)
	Started  time.Time
	Terminal time.Time // when this rank saw it terminal
	Reaped   time.Time // when the outcome consensus applied it
}

// Result is what one status check did.
type Result struct {
	Reaped      []Reaped
	PollWait    time.Duration // time spent in the rank-local poll
	Collectives int           // collectives entered by this check
	Skipped     bool          // consensus skipped (CTX that never sent)
}

// Stats are cumulative counters of one transceiver.
type Stats struct {
	BytesSent       int64
	BytesReceived   int64
	BytesVerified   int64
	Completed       int
	Failed          int
	Cancelled       int
	CancelRefused   int // cancel attempts refused while a write was in flight
	LocalFailures   int // sessions that failed or were cancelled on this rank (before any agreement)
	ControlErrors   int // malformed or unexpected control messages
	Collectives     uint64
	StatusChecks    int
	PollWaitTotal   time.Duration
	MaxPollWait     time.Duration
	SessionsCreated int
}
