// Package launch runs a multi-rank program unchanged on any backend: a
// func(ctx, comm.Comm) error becomes one MPI process per rank under mpirun
// (a binary built with -tags mpi), goroutine ranks in this process, or a
// simulated world in virtual time (RANKRUN_BACKEND=sim). It picks the
// backend from the environment, as the rankrun CLI does:
//
//	func main() {
//		os.Exit(launch.Main(launch.Options{Ranks: 4}, func(ctx context.Context, c comm.Comm) error {
//			...
//		}))
//	}
//
// Checked collectives are on unless Options.Unchecked: a rank that enters
// another collective than its peers gets comm.ErrDesync naming both call
// sites. A test that wants schedules explored calls exploretest.Program, which
// runs the same function in simulation.
//
// Local and Sim are the two in-process worlds the serving job runs on
// (executor.Run takes either; executor imports no backend itself).
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/comm/mpi"
	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/internal/mpienv"
)

// Func is a program: it runs on every rank, with the rank's communicator
// over the whole world.
type Func func(ctx context.Context, c comm.Comm) error

// Options configures a launch. The zero value runs in-process, checked,
// on the ranks mpirun gives or one rank.
type Options struct {
	// Ranks is the world size in-process and in simulation (1 when 0);
	// under mpirun the world is mpirun's, and a Ranks that differs is an
	// error naming both.
	Ranks int
	// Backend: "" or "auto" (MPI under mpirun, else RANKRUN_BACKEND,
	// else in-process), "local", "sim" or "mpi".
	Backend string
	// Unchecked turns checked collectives off.
	Unchecked bool
	// AnySite lets checked collectives entered from different call sites
	// pair up (comm.CheckConfig.AnySite): by default a rank that calls
	// BcastOf on one line while its peers call it on another gets
	// comm.ErrDesync, as for any call-path mismatch.
	AnySite bool
	// Timeout bounds every collective (comm.DefaultCollectiveTimeout when
	// 0); virtual time in simulation. In-process and under mpirun it bounds
	// every point-to-point Wait too: a send or receive no peer matches in
	// time (two ranks that both send first, a tag that does not match, a
	// peer that returned) returns a *comm.WaitTimeoutError naming the rank,
	// the peer and the tag, never a hang. (In simulation such a wait is a
	// deadlock, named as soon as every rank waits.)
	Timeout time.Duration
	// Seed is the simulation's schedule seed (RANKRUN_SEED overrides).
	Seed uint64
	// Stderr is where Main writes errors (os.Stderr when nil).
	Stderr io.Writer
}

// Backend names the backend Options select in this process's environment.
func (o Options) backend() (string, error) {
	b, env := o.Backend, false
	if b == "" || b == "auto" {
		b, env = os.Getenv("RANKRUN_BACKEND"), true
	}
	underMPI := mpienv.Detect().UnderMPI
	switch b {
	case "", "auto":
		if underMPI {
			return "mpi", nil
		}
		return "local", nil
	case "local", "sim":
		if underMPI {
			return "", fmt.Errorf("launch: backend %q under mpirun: every process would run the whole world itself (unset RANKRUN_BACKEND, or run without mpirun)", b)
		}
		return b, nil
	case "mpi":
		return b, nil
	}
	if env {
		return "", fmt.Errorf("launch: RANKRUN_BACKEND=%q: want auto, local, sim or mpi", b)
	}
	return "", fmt.Errorf("launch: backend %q: want auto, local, sim or mpi", b)
}

// Run runs fn on every rank of the world Options select and returns the
// joined errors of the ranks this process hosts (each wrapped with its
// rank), nil when all of them returned nil. In-process and in simulation
// the first rank to fail cancels the others; in simulation a point-to-point
// request a rank left behind (a receive never completed, a send never
// waited on) is an error too. Under mpirun a rank that
// fails prints its error and aborts the job (a peer may be waiting for it
// in a collective); Run returns on success, after MPI_Finalize, or when the
// world is not Options.Ranks large: every rank returns that error, world
// rank 0 at once and the others once mpirun ends the job (world rank 0
// exiting non-zero ends it), so that world rank 0's message is not lost.
func Run(ctx context.Context, o Options, fn Func) error {
	if ctx == nil {
		return fmt.Errorf("%w: launch: nil context (use context.Background())", comm.ErrBadArgument)
	}
	if fn == nil {
		return fmt.Errorf("%w: launch: nil program", comm.ErrBadArgument)
	}
	if o.Ranks < 0 {
		return fmt.Errorf("%w: launch: Ranks %d: want 0 (one rank, or mpirun's world) or more", comm.ErrBadArgument, o.Ranks)
	}
	if o.Timeout < 0 {
		return fmt.Errorf("%w: launch: Timeout %v: want 0 (the default) or more", comm.ErrBadArgument, o.Timeout)
	}
	b, err := o.backend()
	if err != nil {
		return err
	}
	n := max(o.Ranks, 1)
	switch b {
	case "local":
		return causes(local.RunAll(ctx, n, local.Config{Checked: !o.Unchecked, AnySite: o.AnySite, Timeout: o.Timeout, BoundWaits: true}, local.RankFunc(fn)))
	case "sim":
		seed := o.Seed
		if s := os.Getenv("RANKRUN_SEED"); s != "" {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: launch: RANKRUN_SEED=%q: want a decimal schedule seed", comm.ErrBadArgument, s)
			}
			seed = v
		}
		res := sim.Run(ctx, n, sim.Config{Seed: seed, Checked: !o.Unchecked, AnySite: o.AnySite, Timeout: o.Timeout},
			func(ctx context.Context, c comm.Comm, _ clock.Clock) error { return fn(ctx, c) })
		if err := causes(res.Errs); err != nil {
			return err // what the failure cancelled left requests behind: not news
		}
		var left []error
		for _, u := range res.Unfinished {
			left = append(left, fmt.Errorf("launch: left behind: %s", u))
		}
		return errors.Join(left...)
	}
	w, err := mpi.Init(mpi.Config{Checked: !o.Unchecked, AnySite: o.AnySite, Timeout: o.Timeout, BoundWaits: true,
		FinalizeTimeout: finalizeBound(o.Timeout)})
	if err != nil {
		return err
	}
	if o.Ranks > 0 {
		if err := w.RequireSize(o.Ranks); err != nil {
			// Every rank sees the same mismatch: world rank 0 says it
			// and exits first; the others wait for mpirun to end the
			// job, lest their exit kill rank 0 before it printed.
			w.Finalize(2)
			if w.Rank() != 0 {
				mpi.LeaveLast(quietExitBound)
				return errQuiet{err}
			}
			return err
		}
	}
	if err := runRecovered(ctx, w.Comm(), fn); err != nil {
		w.Abort(1, fmt.Errorf("world rank %d: %w", w.Rank(), err))
	}
	if code := w.Finalize(0); code != 0 {
		return fmt.Errorf("launch: a rank exited with code %d", code)
	}
	return nil
}

// finalizeBound is how long a rank that returned waits in Finalize for its
// peers: past their own collective bound (and the stall inspector's
// answers), so that when it returned while they wait in a collective, it
// is their timeout that ends the job, naming it as returned, not its own.
func finalizeBound(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = comm.DefaultCollectiveTimeout
	}
	return max(time.Minute, 2*timeout+10*time.Second)
}

// causes is the ranks' errors (indexed by rank), nil when none failed.
// The first rank to fail cancels the others with its error, so theirs
// wrap that very error value: the message shows each error that carries
// no other rank's once (a panic's stack once, not once per rank) and names
// the ranks whose errors carry it; errors.Is and errors.As still see every
// rank's error.
func causes(errs []error) error {
	e := &rankErrors{}
	for i, err := range errs {
		if err == nil {
			continue
		}
		e.all = append(e.all, err)
		carried := false
		for j, f := range errs {
			if j != i && f != nil && holds(err, f) {
				carried = true
				break
			}
		}
		if carried {
			e.carried = append(e.carried, i)
			continue
		}
		// Ranks that saw one failure alike (a desync every rank detects)
		// say it once, naming them.
		key := sameText(err, i)
		if j, ok := e.alike[key]; ok {
			e.shownRanks[j] = append(e.shownRanks[j], i)
			continue
		}
		if e.alike == nil {
			e.alike = map[string]int{}
		}
		e.alike[key] = len(e.shown)
		e.shown = append(e.shown, err)
		e.shownRanks = append(e.shownRanks, []int{i})
	}
	switch {
	case len(e.all) == 0:
		return nil
	case len(e.shown) == 0: // cannot happen (no error holds itself through another), but never hide them all
		e.shown, e.carried, e.shownRanks = e.all, nil, nil
	}
	return e
}

// sameText is rank i's error as text with the rank's own number taken out
// ("rank 3: ... seen by rank 3: ..."): equal for ranks that failed alike.
func sameText(err error, i int) string {
	s := strings.TrimPrefix(err.Error(), fmt.Sprintf("rank %d: ", i))
	return strings.ReplaceAll(s, fmt.Sprintf("seen by rank %d:", i), "seen by rank ?:")
}

// rankErrors is the failure of a run: every rank's error, shown once.
type rankErrors struct {
	all, shown []error
	shownRanks [][]int // the ranks that failed as each shown error says (nil: one each)
	alike      map[string]int
	carried    []int // ranks whose errors carry another rank's
}

func (e *rankErrors) Error() string {
	var lines []string
	for k, err := range e.shown {
		line := err.Error()
		if k < len(e.shownRanks) && len(e.shownRanks[k]) > 1 {
			line += fmt.Sprintf("\n(ranks %v failed alike: the same error, each seen by itself)", e.shownRanks[k])
		}
		lines = append(lines, line)
	}
	msg := strings.Join(lines, "\n")
	if len(e.carried) > 0 {
		msg += fmt.Sprintf("\n(ranks %v failed with it: their errors carry it)", e.carried)
	}
	return msg
}

func (e *rankErrors) Unwrap() []error { return e.all }

// holds reports whether f itself is in e's tree of wrapped errors (by
// identity: no Is method is asked).
func holds(e, f error) bool {
	if reflect.TypeOf(e).Comparable() && e == f {
		return true
	}
	switch u := e.(type) {
	case interface{ Unwrap() error }:
		return u.Unwrap() != nil && holds(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, x := range u.Unwrap() {
			if x != nil && holds(x, f) {
				return true
			}
		}
	}
	return false
}

// runRecovered runs fn, returning a panic as an error with its stack, as
// the in-process backend does: under mpirun the failing rank then says
// which world rank panicked and aborts the job like any failure.
func runRecovered(ctx context.Context, c comm.Comm, fn Func) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(ctx, c)
}

// Main runs fn as Run does and returns the process's exit code: 0 on
// success, 1 with the errors printed (once, under mpirun: by the failing
// rank, or by world rank 0 for a world of the wrong size) otherwise. Use it
// as os.Exit(launch.Main(opts, fn)).
func Main(o Options, fn Func) int {
	w := o.Stderr
	if w == nil {
		w = os.Stderr
	}
	if err := Run(context.Background(), o, fn); err != nil {
		if !errors.As(err, new(errQuiet)) {
			fmt.Fprintln(w, err)
		}
		return 1
	}
	return 0
}

// quietExitBound bounds how long a rank other than world rank 0 waits for
// mpirun to end a job that world rank 0 refused (mpi.LeaveLast).
const quietExitBound = 30 * time.Second

// errQuiet is an error every rank of an MPI job returns alike, which the
// ranks other than world rank 0 do not print.
type errQuiet struct{ error }

func (e errQuiet) Unwrap() error { return e.error }
