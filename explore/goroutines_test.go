package explore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/sim"
)

// A dump's records: ids, states without their durations or thread locks
// (as the runtime prints them after a minute's wait), creators, and the
// header's extra fields under GOTRACEBACK=system; the run's family is its
// root and every live descendant, grandchildren included.
func TestParseGoroutines(t *testing.T) {
	dump := `goroutine 1 [running]:
main.main()
	/x/main.go:8 +0xa7

goroutine 19 gp=0xc000102a80 m=nil [chan receive, 3 minutes]:
main.main.func1()
	/x/main.go:5 +0x31
created by main.main in goroutine 1
	/x/main.go:5 +0x66

goroutine 20 [select, 2 minutes, locked to thread]:
main.f()
	/x/main.go:6 +0x1d
created by main.main.func1 in goroutine 19
	/x/main.go:6 +0x72

goroutine 21 [runnable]:
main.g()
	/x/main.go:7 +0x1
created by main.f in goroutine 20
	/x/main.go:5 +0x25

goroutine 22 [sync.Mutex.Lock]:
main.h()
	/x/main.go:9 +0x1
created by main.main in goroutine 1
	/x/main.go:9 +0x25
`
	gs := parseGoroutines(dump)
	require.Len(t, gs, 5)
	type rec struct {
		id, parent uint64
		state      string
		canRun     bool
	}
	var got []rec
	for _, g := range gs {
		got = append(got, rec{g.id, g.parent, g.state, g.canRun()})
	}
	require.Equal(t, []rec{
		{1, 0, "running", true},
		{19, 1, "chan receive", false},
		{20, 19, "select", false},
		{21, 20, "runnable", true},
		{22, 1, "sync.Mutex.Lock", false},
	}, got)
	ids := func(gs []goroutine) (out []uint64) {
		for _, g := range gs {
			out = append(out, g.id)
		}
		return out
	}
	require.Equal(t, []uint64{19, 20, 21}, ids(family(gs, 19)))
	require.Equal(t, []uint64{1, 19, 20, 21, 22}, ids(family(gs, 1)))
	require.Empty(t, family(gs, 0), "no root known: no family")
	require.NotZero(t, currentID())
}

// A run that has ended (its root goroutine sent the result and returned)
// is never named stuck, whichever of its result and the timer awaitRun
// sees first: its last step counts no scheduling step.
func TestAwaitRunEndedIsNotStuck(t *testing.T) {
	ids := make(chan uint64)
	go func() { ids <- currentID() }()
	root := <-ids // a goroutine that has returned, as an ended run's root
	for i := range 200 {
		done := make(chan sim.Result, 1)
		done <- sim.Result{Steps: 7}
		res, stuck := awaitRun(context.Background(), done, new(sim.Progress), root, time.Nanosecond, time.Minute)
		require.Empty(t, stuck, "try %d", i)
		require.Equal(t, 7, res.Steps)
	}
}

// The marks the runtime appends to a wait (in a synctest bubble, leaked)
// leave it a wait; iter.Pull's caller waits as a coroutine.
func TestGoroutineStateMarks(t *testing.T) {
	gs := parseGoroutines("goroutine 5 [sleep (durable)]:\nf()\n\ngoroutine 6 [chan receive (leaked), 2 minutes]:\ng()\n\ngoroutine 7 [coroutine]:\nh()\n\ngoroutine 8 [syscall]:\ni()\n")
	require.Len(t, gs, 4)
	require.Equal(t, []string{"sleep", "chan receive", "coroutine", "syscall"}, []string{gs[0].state, gs[1].state, gs[2].state, gs[3].state})
	require.False(t, gs[0].canRun() || gs[1].canRun() || gs[2].canRun())
	require.True(t, gs[3].canRun(), "a system call may return")
}
