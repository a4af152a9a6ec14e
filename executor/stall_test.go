package executor

import (
	"testing"
	"time"
)

// decideStall row by row: the verdict follows from the rank's state, and a
// live or still-offered transfer is waited for only within its bounds.
func TestDecideStall(t *testing.T) {
	const st, tt = time.Second, 5 * time.Second
	for _, tc := range []struct {
		name string
		in   stallInput
		want bool
	}{
		{"nothing waits", stallInput{Waiting: 0, Quiet: time.Hour, StallTimeout: st}, false},
		{"progress within the stall timeout", stallInput{Waiting: 3, Quiet: st / 2, StallTimeout: st}, false},
		{"blocks held with no transfer at all", stallInput{Waiting: 3, Quiet: st, StallTimeout: st}, true},
		{"a transfer still in flight: slow, not stalled", stallInput{Waiting: 3, Quiet: time.Hour, StallTimeout: st, Held: 2, Over: 1, OverFor: time.Hour, TransferTimeout: tt}, false},
		{"seed 001: over, never offered to a check", stallInput{Waiting: 3, Quiet: st, StallTimeout: st, Held: 2, Over: 2, OverFor: st, TransferTimeout: tt}, true},
		{"over and offered: a peer may still hold it", stallInput{Waiting: 3, Quiet: st, StallTimeout: st, Held: 2, Over: 2, Checked: true, OverFor: tt, TransferTimeout: tt}, false},
		{"offered, never applied past the transfer deadline", stallInput{Waiting: 3, Quiet: time.Hour, StallTimeout: st, Held: 2, Over: 2, Checked: true, OverFor: tt + st, TransferTimeout: tt}, true},
		{"a transfer past its deadline, no cancel begun, nothing waits", stallInput{Quiet: st, StallTimeout: st, Held: 1, OverdueFor: st, TransferTimeout: tt}, true},
		{"a transfer just past its deadline: its cancel begins at the next pump", stallInput{Quiet: st, StallTimeout: st, Held: 1, OverdueFor: st / 2, TransferTimeout: tt}, false},
	} {
		if got := decideStall(tc.in); got != tc.want {
			t.Errorf("%s: decideStall(%+v) = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}
