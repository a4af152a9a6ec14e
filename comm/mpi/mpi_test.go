//go:build mpi

package mpi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/commtest"
	"github.com/rankrun/rankrun/comm/flight"
)

// testWorld is initialised by TestMain on every rank of the mpirun job (or
// as a singleton of size 1 when the test binary runs without mpirun).
var testWorld *World

// crashEnv selects a crash helper mode (see TestCrashChild).
const crashEnv = "RANKRUN_MPI_CRASH_HELPER"

func TestMain(m *testing.M) {
	// Serialized is enough for tests on other goroutines than this one:
	// the binding makes one MPI call at a time from any thread.
	w, err := Init(Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpi tests:", err)
		os.Exit(2)
	}
	testWorld = w
	code := m.Run()
	os.Exit(w.Finalize(code))
}

// launcher runs conformance cases on a fresh communicator split from the
// world for every launch: ranks below n take part, the others skip. With
// native, the communicator (and its children) use MPI's non-blocking
// collectives, as groups larger than directMax do.
type launcher struct {
	w      *World
	native bool
}

func (l launcher) Sizes() []int {
	var s []int
	for n := 1; n <= l.w.Size(); n++ {
		s = append(s, n)
	}
	return s
}

func (l launcher) Launch(ctx context.Context, n int, opts commtest.Options, fn commtest.RankFunc) (err error) {
	if n < 1 || n > l.w.Size() {
		return fmt.Errorf("%w: launch of %d ranks in a world of %d", comm.ErrBadArgument, n, l.w.Size())
	}
	color := 0
	if l.w.Rank() >= n {
		color = 1
	}
	sub, err := l.w.Raw().Split(ctx, color, l.w.Rank())
	if err != nil {
		return err
	}
	defer sub.Close()
	// Close sub only once every rank is done with the case. A rank whose
	// collective timed out inspects its peers on sub, and a peer that has
	// closed sub no longer answers: it is then named missing although it
	// arrived. Across hosts (scripts/test-multinode.sh) ranks leave Split
	// at skewed times, so one rank's timeout fired after another had
	// finished and closed (TimeoutNamesMissingRank failed 9 runs in 10).
	defer func() {
		if berr := l.w.Raw().Barrier(ctx); berr != nil && err == nil {
			err = berr
		}
	}()
	if color == 1 {
		return nil
	}
	if opts.Timeout > 0 {
		sub.(*mpiComm).timeout = opts.Timeout
	}
	if l.native {
		mc := sub.(*mpiComm)
		mc.native, mc.direct = true, false
	}
	c := sub
	if opts.Checked {
		c = comm.NewChecked(sub, comm.CheckConfig{Timeout: opts.Timeout, Recorder: l.w.Recorder()})
	}
	return fn(ctx, c)
}

// RankOrderFloats: MPI's own collectives (the native launcher) promise no
// order; the direct path reduces in rank order.
func (l launcher) RankOrderFloats() bool { return !l.native }

func TestConformance(t *testing.T) {
	commtest.Run(t, launcher{w: testWorld})
}

// TestConformanceNative runs the suite over MPI's non-blocking collectives
// (the path of groups larger than directMax).
func TestConformanceNative(t *testing.T) {
	commtest.Run(t, launcher{w: testWorld, native: true})
}

func TestAvailable(t *testing.T) {
	if !Available() {
		t.Fatal("Available() = false in an mpi build")
	}
	if testWorld.Comm().Name() != "world" {
		t.Fatalf("world name %q", testWorld.Comm().Name())
	}
	if lr := testWorld.LocalRank(); lr < 0 || lr >= testWorld.Size() {
		t.Fatalf("local rank %d of %d", lr, testWorld.Size())
	}
}

// The MPI backend sends from and receives into parts (the conformance
// case PointToPointParts passes trivially on backends without it), in
// checked mode too; it does not lend bytes.
func TestVectoredIO(t *testing.T) {
	if comm.PropsOf(testWorld.Raw()).Vectored == nil || comm.PropsOf(testWorld.Comm()).Vectored == nil {
		t.Fatal("the MPI backend has no vectored I/O")
	}
	if comm.PropsOf(testWorld.Comm()).Lender != nil {
		t.Fatal("the MPI backend claims to lend bytes between processes")
	}
}

func TestInitTwice(t *testing.T) {
	if _, err := Init(Config{}); err == nil || !strings.Contains(err.Error(), "already initialised") {
		t.Fatalf("second Init: %v", err)
	}
}

func TestRequireSize(t *testing.T) {
	n := testWorld.Size()
	if err := testWorld.RequireSize(n); err != nil {
		t.Fatal(err)
	}
	err := testWorld.RequireSize(n + 3)
	var se *SizeError
	if !errors.As(err, &se) || se.Want != n+3 || se.Got != n {
		t.Fatalf("RequireSize(%d) = %v", n+3, err)
	}
	for _, frag := range []string{fmt.Sprint(n), fmt.Sprint(n + 3)} {
		if !strings.Contains(err.Error(), frag) {
			t.Fatalf("%q does not name %s", err, frag)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{ThreadLevel: 7}, {Timeout: -1}, {RecorderDepth: -1}, {Size: -2}, {FinalizeTimeout: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

func TestRawBadArguments(t *testing.T) {
	c := testWorld.Raw()
	ctx := context.Background()
	bad := []error{}
	add := func(_ any, err error) { bad = append(bad, err) }
	add(c.Isend(nil, 0, 0))
	add(c.Irecv(nil, 0, 0))
	add(c.Isend([]byte{1}, -1, 0))
	add(c.Isend([]byte{1}, 0, -1))
	add(c.Irecv([]byte{1}, c.Size(), 0))
	add(c.Split(ctx, -1, 0))
	add(c.Bcast(ctx, -1, nil))
	bad = append(bad, c.AllgatherInt64s(ctx, nil, nil))
	bad = append(bad, c.AllreduceInt64(ctx, comm.Sum, []int64{1}, nil))
	bad = append(bad, c.AllreduceInt64(ctx, 0, nil, nil))
	for i, err := range bad {
		if !errors.Is(err, comm.ErrBadArgument) {
			t.Errorf("case %d: %v, want ErrBadArgument", i, err)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHotPathNoAlloc: the unchecked hot path allocates nothing, over the
// direct collectives and over MPI's non-blocking ones; point to point
// allocates only the Request each call returns.
func TestHotPathNoAlloc(t *testing.T) {
	t.Run("direct", func(t *testing.T) { hotPathNoAlloc(t, testWorld.Raw()) })
	t.Run("native", func(t *testing.T) {
		c := splitWorld(t, 20*time.Second)
		c.native, c.direct = true, false
		hotPathNoAlloc(t, c)
	})
	c := testWorld.Raw()
	ctx := context.Background()
	sb, rb := make([]byte, 64), make([]byte, 64)
	if a := testing.AllocsPerRun(200, func() {
		rq, err := c.Irecv(rb, c.Rank(), 30)
		if err != nil {
			panic(err)
		}
		sq, err := c.Isend(sb, c.Rank(), 30)
		if err != nil {
			panic(err)
		}
		if _, err := rq.Wait(ctx); err != nil {
			panic(err)
		}
		if _, err := sq.Wait(ctx); err != nil {
			panic(err)
		}
	}); a > 2 {
		t.Errorf("Irecv + Isend + 2 Waits: %v allocs, want 2 (the Requests)", a)
	}
}

func hotPathNoAlloc(t *testing.T, c comm.Comm) {
	ctx := context.Background()
	in, out := []int64{int64(c.Rank())}, []int64{0}
	if a := testing.AllocsPerRun(200, func() {
		if err := c.AllreduceInt64(ctx, comm.Sum, in, out); err != nil {
			panic(err)
		}
	}); a != 0 {
		t.Errorf("AllreduceInt64 of one int64: %v allocs/op", a)
	}
	var g comm.Gathered
	vals := make([]int64, 64)
	// Grow the buffers to the largest shape first.
	for i := range vals {
		vals[i] = int64(i)
	}
	for range 2 {
		if err := c.AllgatherInt64s(ctx, vals, &g); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	if a := testing.AllocsPerRun(200, func() {
		i++
		k := (c.Rank()*7 + i*3) % 65
		if err := c.AllgatherInt64s(ctx, vals[:k], &g); err != nil {
			panic(err)
		}
	}); a != 0 {
		t.Errorf("AllgatherInt64s of 0..64 values: %v allocs/op", a)
	}
	if a := testing.AllocsPerRun(200, func() {
		if err := c.Barrier(ctx); err != nil {
			panic(err)
		}
	}); a != 0 {
		t.Errorf("Barrier: %v allocs/op", a)
	}
	msg, buf := make([]byte, 64), make([]byte, 64)
	if a := testing.AllocsPerRun(200, func() {
		data := buf
		if c.Rank() == 0 {
			data = msg
		}
		if _, err := c.Bcast(ctx, 0, data); err != nil {
			panic(err)
		}
	}); a != 0 {
		t.Errorf("Bcast of 64 bytes into a reused buffer: %v allocs/op", a)
	}
}

// TestAbandonedCollective: a collective whose context ends leaves the
// group broken on that rank; the orphaned operation completes (and is
// reaped) when its peers enter it later.
func TestAbandonedCollective(t *testing.T) {
	w := testWorld
	if w.Size() < 2 {
		t.Skip("needs 2 ranks")
	}
	ctx := context.Background()
	sub, err := w.Raw().Split(ctx, 0, w.Rank())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	out := []int64{0}
	e := w.e
	orphans := func() int {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.orphans)
	}
	// Earlier tests may have left orphans that never complete (a peer that
	// never arrived): count from here.
	before := orphans()
	if w.Rank() == 0 {
		tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := sub.AllreduceInt64(tctx, comm.Sum, []int64{1}, out)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("abandoned allreduce: %v, want DeadlineExceeded", err)
		}
		if err := sub.Barrier(ctx); !errors.Is(err, comm.ErrBroken) {
			t.Errorf("after abandon: %v, want ErrBroken", err)
		}
	}
	if err := w.Raw().Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Rank() != 0 {
		// Pairs with rank 0's orphan, which rank 0 progresses from its
		// responder.
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := sub.AllreduceInt64(tctx, comm.Sum, []int64{1}, out); err != nil {
			t.Errorf("late allreduce: %v", err)
		} else if out[0] != int64(w.Size()) {
			t.Errorf("late allreduce = %d, want %d", out[0], w.Size())
		}
	}
	if err := w.Raw().Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Rank() == 0 {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := orphans()
			if n <= before {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%d orphans never reaped (%d before)", n, before)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestInspectPeers: every rank inspects at once (each must answer the
// others while waiting), then rank 0 inspects a rank that is busy in
// rank-local work (the background responder answers).
func TestInspectPeers(t *testing.T) {
	w := testWorld
	ctx := context.Background()
	c := w.Raw().(*mpiComm)
	w.Recorder().Begin("inspect-test", uint64(w.Rank()+1), flight.KindBarrier, 0)
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(peers []comm.PeerRecords) {
		t.Helper()
		if len(peers) != w.Size() {
			t.Fatalf("%d peers, want %d", len(peers), w.Size())
		}
		for r, p := range peers {
			if p.Err != nil || p.Rank != r {
				t.Errorf("peer %d: rank %d err %v", r, p.Rank, p.Err)
				continue
			}
			found := false
			for _, rec := range p.Records {
				if rec.Group == "inspect-test" && rec.Seq == uint64(r+1) {
					found = true
				}
			}
			if !found {
				t.Errorf("peer %d: its marker record is missing from %d records", r, len(p.Records))
			}
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	check(c.InspectPeers(ictx))
	cancel()
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Rank() == 0 {
		start := time.Now()
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		check(c.InspectPeers(ictx))
		cancel()
		if d := time.Since(start); d > time.Second {
			t.Errorf("inspection of busy ranks took %v", d)
		}
	} else {
		time.Sleep(300 * time.Millisecond) // rank-local work, no MPI
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestInspectorSaysWhichRankReturned: a rank whose program has returned
// (its World in Finalize, which sets the flag) says so in its answer to
// the stall inspector, and no other rank does; the returned rank is world
// rank 0, then the last.
func TestInspectorSaysWhichRankReturned(t *testing.T) {
	w := testWorld
	ctx := context.Background()
	c := w.Raw().(*mpiComm)
	t.Cleanup(func() { // whatever happens, later tests see no rank returned
		w.e.mu.Lock()
		w.e.returned = false
		w.e.mu.Unlock()
	})
	for _, ret := range []int{0, w.Size() - 1} {
		w.e.mu.Lock()
		w.e.returned = w.Rank() == ret
		w.e.mu.Unlock()
		if err := c.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		peers := c.InspectPeers(ictx)
		cancel()
		for _, p := range peers {
			if p.Err != nil || p.Returned != (p.Rank == ret) {
				t.Errorf("rank %d asks: peer %d says returned %v (err %v); only rank %d returned", w.Rank(), p.Rank, p.Returned, p.Err, ret)
			}
		}
		// Every rank has its answers before any rank clears its flag.
		if err := c.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		w.e.mu.Lock()
		w.e.returned = false
		w.e.mu.Unlock()
	}
}

// TestInspectUnanswered: a peer that never answers (its inspection channel
// is gone) gets PeerRecords.Err when the context ends.
func TestInspectUnanswered(t *testing.T) {
	w := testWorld
	if w.Size() < 2 {
		t.Skip("needs 2 ranks")
	}
	ctx := context.Background()
	sub, err := w.Raw().Split(ctx, 0, w.Rank())
	if err != nil {
		t.Fatal(err)
	}
	if w.Rank() != 0 {
		sub.Close()
	}
	if err := w.Raw().Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Rank() == 0 {
		ictx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		peers := sub.(*mpiComm).InspectPeers(ictx)
		cancel()
		for r, p := range peers {
			if r == 0 && p.Err != nil {
				t.Errorf("self: %v", p.Err)
			}
			if r != 0 && (p.Err == nil || !errors.Is(p.Err, context.DeadlineExceeded)) {
				t.Errorf("peer %d: err %v, want DeadlineExceeded", r, p.Err)
			}
		}
		sub.Close()
	}
	if err := w.Raw().Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCodecRoundTripMPI(t *testing.T) {
	recs := testWorld.Recorder().Snapshot()
	rp, err := decodeReply(encodeReply(reply{nonce: 42, entered: 9, recs: recs}))
	if err != nil || rp.nonce != 42 || rp.entered != 9 || len(rp.recs) != len(recs) {
		t.Fatalf("round trip: nonce %d entered %d, %d records, err %v", rp.nonce, rp.entered, len(rp.recs), err)
	}
}

// childEnv is the environment for an mpirun started from inside an mpirun
// job: the parent job's variables would make the child think it is a rank.
func childEnv(mode string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "PMIX_") || strings.HasPrefix(k, "PMI_") ||
			strings.HasPrefix(k, "OPAL_") || strings.HasPrefix(k, "ORTE_") || strings.HasPrefix(k, "HWLOC_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, crashEnv+"="+mode,
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_pml=ob1",
		"OMPI_MCA_btl_vader_single_copy_mechanism=none",
		"OMPI_MCA_rmaps_base_oversubscribe=1", "OMPI_MCA_hwloc_base_binding_policy=none")
}

// TestRankFailureEndsJob starts child jobs of this test binary in which
// one rank panics, exits, or times out in a checked collective and aborts:
// each job must exit non-zero before its deadline, naming the rank.
func TestRankFailureEndsJob(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("inside a crash helper job")
	}
	if testWorld.Rank() != 0 {
		t.Skip("run by world rank 0 only")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Fatalf("mpirun not found: %v", err)
	}
	for _, tc := range []struct {
		mode string
		want *regexp.Regexp
	}{
		{"panic", regexp.MustCompile(`crash helper: rank 1 panics`)},
		{"exit", regexp.MustCompile(`(?s)Process name: \[\[\d+,1\]\].*Exit code:\s+3|rank 1 .*exit code 3`)},
		{"abort", regexp.MustCompile(`(?s)rank 0 \(world rank 0\) aborts the MPI job.*ranks \[1\] never arrived`)},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			// The bound is the deadline, not a timing goal: under load (the
			// outer job's ranks spin in their own waits beside it) mpirun
			// took 34 s to notice a rank's exit on 2 busy cores.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none",
				os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
			cmd.Env = childEnv(tc.mode)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			d := time.Since(start)
			if ctx.Err() != nil {
				t.Fatalf("child job still running after %v:\n%s", d, out.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("child job: %v, want a non-zero exit:\n%s", err, out.String())
			}
			if !tc.want.MatchString(out.String()) {
				t.Errorf("output does not match %v:\n%s", tc.want, out.String())
			}
			t.Logf("%s: exit %d after %v", tc.mode, ee.ExitCode(), d.Round(time.Millisecond))
		})
	}
}

// TestCrashChild is the crash helper's body; it only runs in child jobs.
func TestCrashChild(t *testing.T) {
	mode := os.Getenv(crashEnv)
	if mode == "" {
		t.Skip("crash helper: only in child jobs of TestRankFailureEndsJob")
	}
	w := testWorld
	ctx := context.Background()
	if err := w.Raw().Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	switch {
	case mode == "abort" && w.Rank() == 0:
		c := newCheckedWorld(w, 300*time.Millisecond)
		if err := c.Barrier(ctx); err != nil {
			w.Abort(3, err)
		}
	case mode == "abort":
		time.Sleep(time.Minute) // never arrives
	case w.Rank() == 1 && mode == "panic":
		panic(fmt.Sprintf("crash helper: rank %d panics on purpose", w.Rank()))
	case w.Rank() == 1 && mode == "exit":
		fmt.Fprintf(os.Stderr, "crash helper: rank %d exits with exit code 3\n", w.Rank())
		os.Exit(3)
	default:
		// The surviving rank waits in a collective its peer never enters.
		_ = w.Raw().Barrier(ctx)
	}
	t.Fatal("crash helper: not reached")
}

// newCheckedWorld wraps the raw world in checked mode with timeout.
func newCheckedWorld(w *World, timeout time.Duration) comm.Comm {
	return comm.NewChecked(w.Raw(), comm.CheckConfig{Timeout: timeout, Recorder: w.Recorder()})
}

// With BoundWaits (launch sets it) a Wait on a receive no peer matches,
// on a communicator split from the world, ends at its timeout with a *comm.WaitTimeoutError naming
// the rank, the peer and the tag; the receive is still posted and can be
// withdrawn. The waiting rank is the first and the last of the world.
func TestBoundedWaitNamesTheUnmatchedReceive(t *testing.T) {
	w := testWorld
	if w.Size() < 2 {
		t.Skip("needs 2 ranks")
	}
	ctx := context.Background()
	// A world initialised with BoundWaits (as launch's is) passes it on
	// to the communicators split from it.
	w.world.boundWaits = true
	sub, err := w.Raw().Split(ctx, 0, w.Rank())
	w.world.boundWaits = false
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sub.(*mpiComm).timeout = 300 * time.Millisecond // the test's bound, on this communicator only
	for _, waiter := range []int{0, w.Size() - 1} {
		peer := (waiter + 1) % w.Size()
		if w.Rank() == waiter {
			q, err := sub.Irecv(make([]byte, 8), peer, 99)
			if err != nil {
				t.Fatal(err)
			}
			_, err = q.Wait(ctx)
			var wte *comm.WaitTimeoutError
			if !errors.As(err, &wte) || !errors.Is(err, comm.ErrWaitTimeout) {
				t.Errorf("rank %d: unmatched receive: %v, want a *comm.WaitTimeoutError", waiter, err)
			} else if want := fmt.Sprintf("after 300ms: rank %d", waiter); !strings.Contains(err.Error(), want) ||
				!strings.Contains(err.Error(), fmt.Sprintf("waited in a receive from rank %d tag 99 that no peer matched", peer)) {
				t.Errorf("rank %d: %v: want it to name %q, the peer and the tag", waiter, err, want)
			}
			if err := q.Cancel(); err != nil {
				t.Errorf("rank %d: withdrawing the receive: %v", waiter, err)
			}
		}
		if err := w.Raw().Barrier(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// comm finds every capability of the MPI backend it looks for by method set
// (comm/capability.go), also under checked mode: a bound, world ranks,
// progress to drive, vectored I/O, and no completion events (MPI's
// progress needs polling).
func TestMPICapabilities(t *testing.T) {
	raw := testWorld.Raw()
	checked := comm.NewChecked(raw, comm.CheckConfig{Timeout: time.Minute, Recorder: testWorld.Recorder()})
	for _, c := range []comm.Comm{raw, checked} {
		if comm.PropsOf(c).Timeout <= 0 {
			t.Errorf("%T: no collective bound", c)
		}
		if w := comm.PropsOf(c).WorldRanks; len(w) != c.Size() {
			t.Errorf("%T: world ranks %v for %d ranks", c, w, c.Size())
		}
		if comm.PropsOf(c).Progress == nil {
			t.Errorf("%T: no progress to drive", c)
		}
		if comm.PropsOf(c).Notify != nil {
			t.Errorf("%T: completion events, which MPI does not have", c)
		}
		if comm.PropsOf(c).Vectored == nil {
			t.Errorf("%T: no vectored I/O", c)
		}
	}
}
