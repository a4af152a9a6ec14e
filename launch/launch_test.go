package launch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/launch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sumOfRanks is a user's program: every rank checks the allreduce of the
// ranks against the closed form.
func sumOfRanks(ctx context.Context, c comm.Comm) error {
	in := []int64{int64(c.Rank())}
	out := make([]int64, 1)
	if err := comm.Allreduce(ctx, c, comm.Sum, in, out); err != nil {
		return err
	}
	n := int64(c.Size())
	if want := n * (n - 1) / 2; out[0] != want {
		return fmt.Errorf("rank %d: sum %d, want %d", c.Rank(), out[0], want)
	}
	return nil
}

// clearMPI keeps a test run under mpirun from seeing its launcher.
func clearMPI(t *testing.T) {
	for _, name := range []string{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "RANKRUN_BACKEND", "RANKRUN_SEED"} {
		t.Setenv(name, "")
	}
}

func TestTheSameProgramRunsInProcessAndInSimulation(t *testing.T) {
	clearMPI(t)
	for _, backend := range []string{"", "local", "sim"} {
		for _, n := range []int{1, 3, 4} {
			ran := make([]bool, n)
			err := launch.Run(context.Background(), launch.Options{Ranks: n, Backend: backend}, func(ctx context.Context, c comm.Comm) error {
				ran[c.Rank()] = true
				return sumOfRanks(ctx, c)
			})
			require.NoError(t, err, "backend %q, %d ranks", backend, n)
			for r, ok := range ran {
				require.True(t, ok, "backend %q: rank %d never ran", backend, r)
			}
		}
	}
}

func TestTheEnvironmentPicksTheBackend(t *testing.T) {
	clearMPI(t)
	// Only the simulator reports a receive left behind, so the program
	// tells the backends apart.
	leaves := func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 0 {
			_, err := c.Irecv(make([]byte, 1), 1, 7)
			return err
		}
		return nil
	}
	require.NoError(t, launch.Run(context.Background(), launch.Options{Ranks: 2}, leaves))
	t.Setenv("RANKRUN_BACKEND", "sim")
	err := launch.Run(context.Background(), launch.Options{Ranks: 2}, leaves)
	require.ErrorContains(t, err, "left behind: rank 0: receive from 1 tag 7")
	// An explicit Options.Backend wins over the environment.
	require.NoError(t, launch.Run(context.Background(), launch.Options{Ranks: 2, Backend: "local"}, leaves))
}

func TestRankErrorsComeBackNamed(t *testing.T) {
	clearMPI(t)
	for _, backend := range []string{"local", "sim"} {
		for _, bad := range []int{0, 2, 4} { // first, middle, last of 5
			err := launch.Run(context.Background(), launch.Options{Ranks: 5, Backend: backend}, func(ctx context.Context, c comm.Comm) error {
				if c.Rank() == bad {
					return errors.New("boom")
				}
				return c.Barrier(ctx)
			})
			require.Error(t, err, "backend %s, rank %d", backend, bad)
			require.Contains(t, err.Error(), fmt.Sprintf("rank %d", bad), "backend %s", backend)
			require.Contains(t, err.Error(), "boom", "backend %s", backend)
		}
	}
}

func TestCheckedByDefault(t *testing.T) {
	clearMPI(t)
	desync := func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 1 {
			return c.Barrier(ctx)
		}
		return comm.Allreduce(ctx, c, comm.Sum, []int32{1}, make([]int32, 1))
	}
	for _, backend := range []string{"local", "sim"} {
		err := launch.Run(context.Background(), launch.Options{Ranks: 3, Backend: backend}, desync)
		require.ErrorIs(t, err, comm.ErrDesync, "backend %s", backend)
		// Only checked mode names where each side entered.
		require.Contains(t, err.Error(), "entered Barrier #1 at launch/launch_test.go", "backend %s", backend)
		err = launch.Run(context.Background(), launch.Options{Ranks: 3, Backend: backend, Unchecked: true}, desync)
		require.ErrorIs(t, err, comm.ErrDesync, "backend %s", backend)
		require.Contains(t, err.Error(), "unchecked mode cannot name call sites", "backend %s", backend)
	}
}

// The MPI habit of calling one collective from two branches: an error by
// default (call paths differ), accepted with AnySite, where a real
// mismatch is still a desync that names both sites.
func TestAnySitePairsCallSitesButNotKinds(t *testing.T) {
	clearMPI(t)
	branches := func(ctx context.Context, c comm.Comm) error {
		buf := make([]float64, 3)
		if c.Rank() == 1 {
			buf[0], buf[1], buf[2] = 1, 2, 3
			return comm.BcastOf(ctx, c, 1, buf)
		}
		if err := comm.BcastOf(ctx, c, 1, buf); err != nil {
			return err
		}
		if buf[2] != 3 {
			return fmt.Errorf("rank %d got %v", c.Rank(), buf)
		}
		return nil
	}
	for _, backend := range []string{"local", "sim"} {
		err := launch.Run(context.Background(), launch.Options{Ranks: 3, Backend: backend}, branches)
		require.ErrorIs(t, err, comm.ErrDesync, "backend %s: call paths differ", backend)
		require.NoError(t, launch.Run(context.Background(), launch.Options{Ranks: 3, Backend: backend, AnySite: true}, branches), "backend %s", backend)
		err = launch.Run(context.Background(), launch.Options{Ranks: 3, Backend: backend, AnySite: true}, func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 2 {
				return comm.BcastOf(ctx, c, 0, make([]float32, 3))
			}
			return comm.BcastOf(ctx, c, 0, make([]float64, 3))
		})
		require.ErrorIs(t, err, comm.ErrDesync, "backend %s: float32 against float64", backend)
		require.Contains(t, err.Error(), "launch/launch_test.go", "backend %s: the report names the call sites", backend)
	}
}

func TestBadOptionsGetOneLine(t *testing.T) {
	clearMPI(t)
	var out bytes.Buffer
	code := launch.Main(launch.Options{Backend: "gpu", Stderr: &out}, sumOfRanks)
	require.Equal(t, 1, code)
	require.Equal(t, `launch: backend "gpu": want auto, local, sim or mpi`+"\n", out.String())
	t.Setenv("RANKRUN_BACKEND", "bogus")
	require.EqualError(t, launch.Run(context.Background(), launch.Options{}, sumOfRanks),
		`launch: RANKRUN_BACKEND="bogus": want auto, local, sim or mpi`, "the environment named as the source")
	t.Setenv("RANKRUN_BACKEND", "")

	require.ErrorIs(t, launch.Run(context.Background(), launch.Options{}, nil), comm.ErrBadArgument)
	var noContext context.Context
	require.EqualError(t, launch.Run(noContext, launch.Options{}, sumOfRanks),
		comm.ErrBadArgument.Error()+": launch: nil context (use context.Background())", "an error, not a panic")
	err := launch.Run(context.Background(), launch.Options{Ranks: -3}, sumOfRanks)
	require.ErrorIs(t, err, comm.ErrBadArgument)
	require.EqualError(t, err, comm.ErrBadArgument.Error()+": launch: Ranks -3: want 0 (one rank, or mpirun's world) or more")

	t.Setenv("RANKRUN_BACKEND", "sim")
	for _, bad := range []string{"seven", "12abc", "-1"} {
		t.Setenv("RANKRUN_SEED", bad)
		require.ErrorContains(t, launch.Run(context.Background(), launch.Options{Ranks: 2}, sumOfRanks), fmt.Sprintf("RANKRUN_SEED=%q: want a decimal schedule seed", bad))
	}

	// Under mpirun an in-process backend would run the whole world in
	// every process: refused, with the way out.
	t.Setenv("RANKRUN_SEED", "")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
	err = launch.Run(context.Background(), launch.Options{Ranks: 2}, sumOfRanks)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "under mpirun"), err.Error())
}

// In-process, a point-to-point wait no peer matches ends within Timeout
// with a named error (rank, peer, tag), never a hang or the runtime's
// "all goroutines are asleep": a tag that does not match, two ranks that
// both wait on their send first, a peer that returned. The waiting rank
// is the first, a middle and the last of three.
func TestPointToPointWaitsAreBounded(t *testing.T) {
	clearMPI(t)
	const n = 3
	for _, waiter := range []int{0, 1, n - 1} {
		peer := (waiter + 1) % n
		for _, tc := range []struct {
			name string
			fn   func(ctx context.Context, c comm.Comm) error
			want string
		}{
			{"tags differ", func(ctx context.Context, c comm.Comm) error {
				switch c.Rank() {
				case waiter:
					return recv(ctx, c, 4, peer, 2)
				case peer:
					q, err := c.Isend([]byte{1, 2, 3, 4}, waiter, 1)
					if err != nil {
						return err
					}
					_, err = q.Wait(ctx)
					return err
				}
				return nil
			}, fmt.Sprintf("rank (%d waited in a receive from rank %d tag 2|%d waited in a send to rank %d tag 1) that no peer matched", waiter, peer, peer, waiter)},
			{"both send first", func(ctx context.Context, c comm.Comm) error {
				if c.Rank() != waiter && c.Rank() != peer {
					return nil
				}
				other := peer
				if c.Rank() == peer {
					other = waiter
				}
				q, err := c.Isend(make([]byte, 8), other, 7)
				if err != nil {
					return err
				}
				if _, err := q.Wait(ctx); err != nil {
					return err
				}
				return recv(ctx, c, 8, other, 7)
			}, fmt.Sprintf("rank (%d waited in a send to rank %d|%d waited in a send to rank %d) tag 7 that no peer matched", waiter, peer, peer, waiter)},
			{"the peer returned", func(ctx context.Context, c comm.Comm) error {
				if c.Rank() != waiter {
					return nil
				}
				return recv(ctx, c, 1, peer, 3)
			}, fmt.Sprintf("rank %d waited in a receive from rank %d tag 3 that no peer matched", waiter, peer)},
		} {
			got := make(chan error, 1)
			go func() {
				got <- launch.Run(context.Background(), launch.Options{Ranks: n, Backend: "local", Timeout: 200 * time.Millisecond}, tc.fn)
			}()
			var err error
			select {
			case err = <-got:
			case <-time.After(30 * time.Second):
				t.Fatalf("rank %d: %s: the run never ended", waiter, tc.name)
			}
			require.ErrorIs(t, err, comm.ErrWaitTimeout, "rank %d: %s", waiter, tc.name)
			require.ErrorContains(t, err, "comm: point-to-point wait timeout on group \"world\" after 200ms", "rank %d: %s", waiter, tc.name)
			require.Regexp(t, tc.want, err.Error(), "rank %d: %s", waiter, tc.name)
		}
	}
}

// A rank that returns while its peers wait in a collective is named as
// returned, whichever rank it is, checked or not (in-process: its rank
// function returned;
// under mpirun scripts/test-examples.sh step 4 checks the same, with the
// rank in Finalize), never as a desync. Its peers fail at once: the
// collective bound is an hour, and the error says no bound ran out
// (before, they waited the whole bound for a rank that enters nothing
// more; this test's own deadline would end such a run).
func TestAnEarlyReturnIsNamed(t *testing.T) {
	clearMPI(t)
	const n = 4
	for i, early := range []int{0, 2, n - 1, 0, 2, n - 1} {
		unchecked := i >= 3 // unchecked: no flight records, still named
		got := make(chan error, 1)
		go func() {
			got <- launch.Run(context.Background(), launch.Options{Ranks: n, Backend: "local", Timeout: time.Hour, Unchecked: unchecked},
				func(ctx context.Context, c comm.Comm) error {
					if c.Rank() == early {
						return nil
					}
					return c.Barrier(ctx)
				})
		}()
		var err error
		select {
		case err = <-got:
		case <-time.After(30 * time.Second):
			t.Fatalf("rank %d returned early (unchecked %v): the run never ended", early, unchecked)
		}
		require.ErrorIs(t, err, comm.ErrCollectiveTimeout, "rank %d returned early (unchecked %v)", early, unchecked)
		require.NotErrorIs(t, err, comm.ErrDesync, "rank %d returned early (unchecked %v)", early, unchecked)
		require.ErrorContains(t, err, fmt.Sprintf("ranks [%d] never arrived; rank %d has returned from its program: it enters nothing more", early, early), "unchecked %v", unchecked)
		var te *comm.TimeoutError
		require.ErrorAs(t, err, &te)
		require.Zero(t, te.Bound, "rank %d returned early (unchecked %v): its peers waited out the bound: %v", early, unchecked, err)
	}
}

func recv(ctx context.Context, c comm.Comm, size, src, tag int) error {
	q, err := c.Irecv(make([]byte, size), src, tag)
	if err != nil {
		return err
	}
	_, err = q.Wait(ctx)
	return err
}

// A rank's panic comes back once, with its stack, whichever rank it is:
// the peers it cancelled carry it in their errors, and those are not
// repeated; in-process and in simulation.
func TestAPanicIsReportedOnce(t *testing.T) {
	clearMPI(t)
	for _, backend := range []string{"local", "sim"} {
		for _, bad := range []int{0, 2, 3} {
			err := launch.Run(context.Background(), launch.Options{Ranks: 4, Backend: backend}, func(ctx context.Context, c comm.Comm) error {
				if c.Rank() == bad {
					panic(fmt.Sprintf("boom on rank %d", bad))
				}
				return c.Barrier(ctx)
			})
			require.Error(t, err)
			msg := err.Error()
			require.Equal(t, 1, strings.Count(msg, fmt.Sprintf("panic: boom on rank %d", bad)), "backend %s:\n%s", backend, msg)
			require.Len(t, regexp.MustCompile(`goroutine \d+ \[`).FindAllString(msg, -1), 1, "one stack, backend %s:\n%s", backend, msg)
			require.True(t, strings.HasPrefix(msg, fmt.Sprintf("rank %d: panic: boom on rank %d", bad, bad)), "backend %s:\n%s", backend, msg)
		}
	}
}

// codeErr matches any codeErr of its code (a user's error type with a
// loose Is): two ranks that return one each are two failures, not one
// error carrying the other.
type codeErr struct{ code int }

func (e *codeErr) Error() string { return fmt.Sprintf("code %d", e.code) }
func (e *codeErr) Is(t error) bool {
	var x *codeErr
	return errors.As(t, &x) && x.code == e.code
}

// A run's failure is never lost: errors that match each other by a loose
// Is are both named (said once when their texts are alike), and a rank that joins an error of its own to the
// cancellation keeps it reachable (errors.Is) and is named.
func TestRankErrorsAreNeverLost(t *testing.T) {
	clearMPI(t)
	for _, backend := range []string{"local", "sim"} {
		err := launch.Run(context.Background(), launch.Options{Ranks: 3, Backend: backend}, func(ctx context.Context, c comm.Comm) error {
			if c.Rank() != 1 {
				return &codeErr{5}
			}
			return nil
		})
		require.Error(t, err, "backend %s", backend)
		// Both named: rank 0's error, and the ranks that failed alike.
		require.Contains(t, err.Error(), "rank 0: code 5\n(ranks [0 2] failed alike", "backend %s", backend)
		require.Len(t, err.(interface{ Unwrap() []error }).Unwrap(), 2, "each rank's error reachable, backend %s", backend)

		own := errors.New("rank 2's own cleanup failed")
		err = launch.Run(context.Background(), launch.Options{Ranks: 3, Backend: backend}, func(ctx context.Context, c comm.Comm) error {
			switch c.Rank() {
			case 0:
				return errors.New("boom")
			case 2:
				<-ctx.Done()
				return errors.Join(own, context.Cause(ctx))
			}
			return nil
		})
		require.ErrorIs(t, err, own, "backend %s", backend)
		require.Contains(t, err.Error(), "rank 0: boom", "backend %s", backend)
		require.Contains(t, err.Error(), "(ranks [2] failed with it: their errors carry it)", "backend %s", backend)
	}
}

// A desync every rank sees is said once, naming the ranks that saw it
// alike, and its call sites are the program's, not the runtime's frames
// that run a rank; in-process and in simulation, whichever rank diverges.
func TestADesyncIsReportedOnce(t *testing.T) {
	clearMPI(t)
	for _, backend := range []string{"local", "sim"} {
		for _, odd := range []int{0, 2, 3} {
			err := launch.Run(context.Background(), launch.Options{Ranks: 4, Backend: backend}, func(ctx context.Context, c comm.Comm) error {
				if c.Rank() == odd {
					return c.Barrier(ctx)
				}
				out := make([]int64, 1)
				return c.AllreduceInt64(ctx, comm.Sum, []int64{1}, out)
			})
			require.ErrorIs(t, err, comm.ErrDesync, "backend %s", backend)
			msg := err.Error()
			require.Equal(t, 1, strings.Count(msg, "collective desync"), "backend %s, odd rank %d:\n%s", backend, odd, msg)
			require.Contains(t, msg, "(ranks [0 1 2 3] failed alike", "backend %s:\n%s", backend, msg)
			for _, frame := range []string{"local/world.go", "sim/world.go", "launch.go", "testing.go"} {
				require.NotContains(t, msg, frame, "backend %s: the runtime's own frames:\n%s", backend, msg)
			}
		}
	}
}
