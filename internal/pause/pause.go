// Package pause is the sleep between polls of a backend that has no
// completion events (MPI): the MPI binding's progress loop and the
// transceiver's bounded poll take it.
package pause

import (
	"syscall"
	"time"
)

// Poll sleeps about d (capped at 1 ms). A Go timer shorter than a
// millisecond sleeps a whole millisecond when the process is otherwise
// idle (the runtime's poller waits in milliseconds: 50 us timers took
// 1.08 ms here), which would put a millisecond of latency on every idle
// wake-up; the kernel's nanosleep keeps it near d (124 us for 50 us here).
func Poll(d time.Duration) {
	d = min(max(d, 0), time.Millisecond)
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil)
}
