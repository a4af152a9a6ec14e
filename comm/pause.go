package comm

import (
	"syscall"
	"time"
)

// PollPause sleeps about d (capped at 1 ms) between polls of a backend that
// has no completion events (MPI). A Go timer shorter than a millisecond
// sleeps a whole millisecond when the process is otherwise idle (the
// runtime's poller waits in milliseconds: 50 us timers took 1.08 ms here),
// which would put a millisecond of latency on every idle wake-up; the
// kernel's nanosleep keeps it near d (124 us for 50 us here).
func PollPause(d time.Duration) {
	d = min(max(d, 0), time.Millisecond)
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil)
}
