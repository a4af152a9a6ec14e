// The flight recorder of a checked communicator (package flight), where a
// rank records its guards: the rank-local values its next collective
// decision depends on (DESIGN.md §12).

package comm

import "github.com/rankrun/rankrun/comm/flight"

// recorderOf returns the flight recorder behind c (checked mode), or nil:
// a rank resolves it once and records its guards on it (Recorder.Guards;
// a no-op on nil).
func recorderOf(c Comm) *flight.Recorder {
	for c != nil {
		if ch, ok := c.(*checked); ok {
			return ch.cfg.Recorder
		}
		w, ok := c.(wrapper)
		if !ok {
			return nil
		}
		c = w.Unwrap()
	}
	return nil
}

// Entered is how many collectives this rank has entered on c, in checked
// mode (ok false otherwise, or while a collective on c is in progress on
// another goroutine): what a failure dump records of each group, so that
// a reader knows how far the group got even when the flight recorder has
// let its early collectives go.
func Entered(c Comm) (n uint64, ok bool) {
	for c != nil {
		if ch, isChecked := c.(*checked); isChecked {
			if !ch.mu.TryLock() {
				return 0, false
			}
			defer ch.mu.Unlock()
			return ch.seq, true
		}
		w, isWrapper := c.(wrapper)
		if !isWrapper {
			return 0, false
		}
		c = w.Unwrap()
	}
	return 0, false
}
