package comm

import (
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm/flight"
)

// Props is what a communicator offers beyond Comm, looked up through the
// wrappers around its backend (checked mode): the time its ranks keep,
// its bounds, its flight recorder, its transports. The runtime's cores
// read them once, when they start on a communicator.
type Props struct {
	// Backend is the communicator under every wrapper.
	Backend Comm
	// Clock is its ranks' time: each rank's virtual clock under the
	// simulation backend, the real clock otherwise.
	Clock clock.Clock
	// Timeout is the bound the backend itself puts on every collective
	// (0: none of its own; checked mode then bounds them).
	Timeout time.Duration
	// Checked says whether it is in checked mode; Recorder is then its
	// flight recorder (nil otherwise).
	Checked  bool
	Recorder *flight.Recorder
	// WorldRanks is the world rank of each rank of its group, group rank 0
	// first (nil where the backend does not say); read only.
	WorldRanks []int
	// Notify, where not nil, is signalled when a request of this rank may
	// have completed, so that a waiter need not poll.
	Notify <-chan struct{}
	// Progress, where not nil, drives the backend's point-to-point bytes
	// for up to budget and returns early when a request completes; false
	// means nothing was in flight. Under MPI a large message travels in
	// fragments, each waiting for a progress call on both sides: a caller
	// waiting for bytes it knows are moving calls it instead of sleeping.
	Progress func(budget time.Duration) bool
	// Lender and Vectored are its zero-copy transports, nil where it has
	// none: loans of the sender's bytes (in-process), and messages sent
	// from and received into several buffers without a packing copy.
	Lender   Lender
	Vectored Vectored
}

// PropsOf looks c's properties up (nil: none, with the real clock).
func PropsOf(c Comm) Props {
	if c == nil {
		return Props{Clock: clock.Real()}
	}
	return Props{Backend: unwrap(c), Clock: clockOf(c), Timeout: timeoutOf(c), Checked: isChecked(c), Recorder: recorderOf(c),
		WorldRanks: worldRanksOf(c), Notify: notifyOf(c), Progress: progressOf(c), Lender: lenderOf(c), Vectored: vectoredOf(c)}
}
