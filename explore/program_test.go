package explore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/explore"
)

// Each oracle of SearchProgram on a program that breaks it: the failure
// names what broke and on which rank, and a correct program passes.
func TestSearchProgramOracles(t *testing.T) {
	ctx := context.Background()
	stop := make(chan struct{}) // ends the goroutine one case leaves running
	defer close(stop)
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, c comm.Comm) error
		want []string
	}{
		{"a rank-local branch picks another collective", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 2 {
				return c.Barrier(ctx)
			}
			return comm.Allreduce(ctx, c, comm.Sum, []float32{1}, make([]float32, 1))
		}, []string{"comm: collective desync", "Barrier", "Allreduce"}},
		{"a rank returns without entering", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 0 {
				return nil
			}
			return c.Barrier(ctx)
		}, []string{"sim: deadlock", "rank 0 returned", "Barrier #1 on world"}},
		{"a receive nobody sends", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 1 {
				if _, err := c.Irecv(make([]byte, 4), 0, 9); err != nil {
					return err
				}
			}
			return nil
		}, []string{"left behind: rank 1: receive from 0 tag 9 on world, not complete when the rank returned"}},
		{"a send never waited", func(ctx context.Context, c comm.Comm) error {
			switch c.Rank() {
			case 0:
				_, err := c.Isend([]byte("x"), 1, 3)
				return err
			case 1:
				q, err := c.Irecv(make([]byte, 1), 0, 3)
				if err != nil {
					return err
				}
				_, err = q.Wait(ctx)
				return err
			}
			return nil
		}, []string{"left behind: rank 0: send to 1 tag 3 on world"}},
		{"a panic in a rank", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 1 {
				var m map[string]int
				m["x"] = 1
			}
			return c.Barrier(ctx)
		}, []string{"rank 1: panic: assignment to entry in nil map"}},
		{"the program's own assertion", func(ctx context.Context, c comm.Comm) error {
			out := make([]int64, 1)
			if err := comm.Allreduce(ctx, c, comm.Sum, []int64{1}, out); err != nil {
				return err
			}
			if out[0] != 4 {
				return errors.New("sum is not 4")
			}
			return nil
		}, []string{"rank 0: sum is not 4"}},
		{"a goroutine left running", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 0 {
				go func() { <-stop }()
			}
			return nil
		}, []string{"goroutines the ranks started are still running: 1, the first goroutine ", " [chan receive]: github.com/rankrun/rankrun/explore_test."}},
		{"goroutines left running by the last rank and a helper of its own", func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == c.Size()-1 {
				go func() { go func() { <-stop }(); <-stop }()
			}
			return nil
		}, []string{"goroutines the ranks started are still running: 2, the first goroutine "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := explore.SearchProgram(ctx, 3, tc.fn, explore.ProgramOptions{Seeds: 20})
			require.NotNil(t, res.First, "no schedule failed")
			msg := res.First.Error()
			for _, w := range tc.want {
				require.Contains(t, msg, w)
			}
		})
	}
	ok := explore.SearchProgram(ctx, 3, func(ctx context.Context, c comm.Comm) error {
		out := make([]float64, 2)
		if err := comm.Allreduce(ctx, c, comm.Sum, []float64{1, 2}, out); err != nil {
			return err
		}
		if out[0] != 3 || out[1] != 6 {
			return errors.New("wrong sum")
		}
		return c.Barrier(ctx)
	}, explore.ProgramOptions{Seeds: 20})
	require.Nil(t, ok.First)
	require.Equal(t, 20, ok.Schedules)
}

// racy is a schedule-dependent desync. Rank 0 takes the first message to
// arrive; when it comes from rank 1 every rank enters a barrier, and when
// another rank's message wins rank 0 alone enters an allreduce. Every rank
// enters through the same call site (enter), so the good schedules pass
// checked mode; on 2 ranks only rank 1 sends, so the bug needs 3.
func racy(ctx context.Context, c comm.Comm) error {
	barrier := true
	if c.Rank() == 0 {
		buf := make([]byte, 1)
		first := -1
		for range c.Size() - 1 {
			q, err := c.Irecv(buf, comm.AnySource, 1)
			if err != nil {
				return err
			}
			st, err := q.Wait(ctx)
			if err != nil {
				return err
			}
			if first < 0 {
				first = st.Source
			}
		}
		barrier = first == 1
	} else {
		q, err := c.Isend([]byte{1}, 0, 1)
		if err != nil {
			return err
		}
		if _, err := q.Wait(ctx); err != nil {
			return err
		}
	}
	return enter(ctx, c, barrier)
}

func enter(ctx context.Context, c comm.Comm, barrier bool) error {
	if barrier {
		return c.Barrier(ctx)
	}
	return comm.Allreduce(ctx, c, comm.Max, []int64{0}, make([]int64, 1))
}

// The bug needs one kind of interleaving: some schedules pass and some
// fail, the search finds one, the failure shrinks to the fewest ranks that
// show it, and the failing seed replays to the same schedule and the same
// failure.
func TestSearchProgramFindsAScheduleBugAndShrinks(t *testing.T) {
	ctx := context.Background()
	failed := 0
	for seed := uint64(1); seed <= 40; seed++ {
		if explore.SearchProgram(ctx, 3, racy, explore.ProgramOptions{Seeds: 1, Start: seed}).First != nil {
			failed++
		}
	}
	require.Greater(t, failed, 0, "no schedule of 40 fails: the bug is never tried")
	require.Less(t, failed, 40, "every schedule fails: the bug does not depend on the schedule, so this test proves nothing about replays")
	require.Nil(t, explore.SearchProgram(ctx, 2, racy, explore.ProgramOptions{Seeds: 40}).First, "on 2 ranks no schedule can fail")

	res := explore.SearchProgram(ctx, 4, racy, explore.ProgramOptions{Seeds: 200, MinRanks: 2})
	require.NoError(t, res.Err)
	require.NotNil(t, res.First, "the interleaving was never tried")
	require.Contains(t, res.First.Error(), "collective desync")
	require.Equal(t, 3, res.Smallest.Ranks, "the bug shows on 3 ranks, not on 2")
	// The same seed and strategy replay the same schedule and fail alike.
	again := explore.SearchProgram(ctx, res.Smallest.Ranks, racy,
		explore.ProgramOptions{Seeds: 1, Start: res.Smallest.Seed, Strategy: &res.Smallest.Strategy})
	require.NotNil(t, again.First)
	require.Equal(t, res.Smallest.Why, again.First.Why)
	require.Equal(t, res.Smallest.Result.Schedule, again.First.Result.Schedule, "the replay took other scheduling choices")
}

// A rank blocked outside the simulator (here on a channel the ranks
// share) stops the scheduler: the search names it stuck, with where the
// rank waits, instead of hanging. So for the first, a middle and the
// last rank.
func TestSearchProgramNamesAStuckRank(t *testing.T) {
	for _, r := range []int{0, 1, 2} {
		block := make(chan struct{})
		res := explore.SearchProgram(context.Background(), 3, func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == r {
				<-block
			}
			return c.Barrier(ctx)
		}, explore.ProgramOptions{Seeds: 5, Stuck: 200 * time.Millisecond, MinRanks: 1})
		close(block) // lets the stuck rank go, so nothing leaks past the test
		require.NotNil(t, res.First, "rank %d", r)
		require.True(t, res.First.Stuck)
		require.Equal(t, 1, res.Schedules, "the search stops at a stuck schedule")
		require.Same(t, res.First, res.Smallest, "no shrinking past a stuck schedule")
		msg := res.First.Error()
		require.Regexp(t, `stuck: no scheduling step for [0-9.]+m?s of wall time`, msg)
		require.Contains(t, msg, "no goroutine of the run can run")
		require.Contains(t, msg, "explore_test.TestSearchProgramNamesAStuckRank", "the stack of the rank that waits")
		require.Contains(t, msg, "left running")
		// The ranks were released above; they return.
		require.NoError(t, goleak.Find()) // Find retries while goroutines wind down
	}
}

// A rank that works rank-local for longer than Stuck (here 20 times
// longer: on a loaded host any stretch without a CPU looks the same) is
// still running, not stuck: the search waits for it, whichever rank it
// is, and whether it works itself or waits on a goroutine it started.
func TestSearchProgramWaitsOutRankLocalWork(t *testing.T) {
	for _, how := range []string{"itself", "helper", "launched"} {
		for _, r := range []int{0, 1, 2} {
			res := explore.SearchProgram(context.Background(), 3, func(ctx context.Context, c comm.Comm) error {
				if c.Rank() == r {
					done := make(chan struct{})
					work := func() {
						defer close(done)
						spin(time.Second)
					}
					switch how {
					case "itself":
						work()
					case "helper": // a goroutine the rank started
						go work()
					case "launched": // started by a goroutine that has returned
						go func() { go work() }()
					}
					<-done
				}
				return c.Barrier(ctx)
			}, explore.ProgramOptions{Seeds: 1, Stuck: 50 * time.Millisecond, Spin: time.Minute})
			require.Nil(t, res.First, "rank %d's work (%s) was named stuck: %v", r, how, res.First)
			require.NoError(t, goleak.Find())
		}
	}
}

// An interrupted search does not wait Spin for a rank that spins: past
// Stuck without a step it names the schedule.
func TestSearchProgramInterruptedDoesNotWaitSpin(t *testing.T) {
	var release atomic.Bool
	defer release.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	res := awaitSearch(t, &release, "the interrupted search waited on the spinning rank", func() explore.ProgramResult {
		return explore.SearchProgram(ctx, 3, func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 0 {
				for !release.Load() {
				}
			}
			return c.Barrier(ctx)
		}, explore.ProgramOptions{Seeds: 5, Stuck: 50 * time.Millisecond, Spin: time.Hour})
	}, func() {
		time.Sleep(100 * time.Millisecond) // the search is under way (nothing waits on this: any moment will do)
		cancel()
	})
	require.NotNil(t, res.First)
	require.True(t, res.First.Stuck)
	require.Contains(t, res.First.Error(), "kept running")
	require.NoError(t, goleak.Find())
}

// A rank that spins without a comm call never yields: past Spin the
// search names it, with the spinning stack, and says the goroutines were
// running (the verdict a starved host could also cause).
func TestSearchProgramNamesASpinningRank(t *testing.T) {
	var release atomic.Bool
	defer release.Store(true)
	res := awaitSearch(t, &release, "the search never named the spinning rank", func() explore.ProgramResult {
		return explore.SearchProgram(context.Background(), 3, func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == 2 {
				for !release.Load() {
				}
			}
			return c.Barrier(ctx)
		}, explore.ProgramOptions{Seeds: 5, Stuck: 50 * time.Millisecond, Spin: 400 * time.Millisecond})
	}, func() {})
	require.NotNil(t, res.First)
	require.True(t, res.First.Stuck)
	msg := res.First.Error()
	require.Regexp(t, `stuck: no scheduling step for [0-9.]+m?s of wall time`, msg)
	require.Contains(t, msg, "kept running")
	require.Contains(t, msg, "explore_test.TestSearchProgramNamesASpinningRank", "the spinning stack")
	require.NoError(t, goleak.Find())
}

// awaitSearch runs search on its own goroutine, then meanwhile, and
// returns its result, or fails t with never after 20 s; either way it
// then releases the spinning rank.
func awaitSearch(t *testing.T, release *atomic.Bool, never string, search func() explore.ProgramResult, meanwhile func()) explore.ProgramResult {
	t.Helper()
	defer release.Store(true)
	got := make(chan explore.ProgramResult, 1)
	go func() { got <- search() }()
	meanwhile()
	select {
	case res := <-got:
		return res
	case <-time.After(20 * time.Second):
		release.Store(true)
		t.Fatal(never)
		return explore.ProgramResult{}
	}
}

// spin keeps the CPU busy for d of wall time, with no call that waits.
func spin(d time.Duration) {
	start, x := time.Now(), 0
	for time.Since(start) < d {
		x++
	}
	_ = x
}

// Bad options are one line naming the field and the rule; nothing runs.
func TestSearchProgramBadOptions(t *testing.T) {
	ok := func(ctx context.Context, c comm.Comm) error { return nil }
	for _, tc := range []struct {
		n    int
		fn   func(ctx context.Context, c comm.Comm) error
		o    explore.ProgramOptions
		want string
	}{
		{0, ok, explore.ProgramOptions{}, "explore: 0 ranks: want at least 1"},
		{2, nil, explore.ProgramOptions{}, "explore: nil program"},
		{2, ok, explore.ProgramOptions{Seeds: -1}, "explore: Seeds -1: want 0 (the default, 200) or more"},
		{2, ok, explore.ProgramOptions{MinRanks: 3}, "explore: MinRanks 3: want 0 (no shrinking) to the 2 ranks"},
		{2, ok, explore.ProgramOptions{Depth: -1}, "explore: Depth -1: want 0 (the default, 3) or more"},
		{2, ok, explore.ProgramOptions{Budget: -time.Second}, "explore: Budget -1s: want 0 (the default, none) or more"},
		{2, ok, explore.ProgramOptions{Timeout: -1}, "explore: Timeout -1ns: want 0 (the default, 10s) or more"},
		{2, ok, explore.ProgramOptions{Deadline: -time.Minute}, "explore: Deadline -1m0s: want 0 (the default, 1h) or more"},
		{2, ok, explore.ProgramOptions{Stuck: -time.Millisecond}, "explore: Stuck -1ms: want 0 (the default, 10s) or more"},
		{2, ok, explore.ProgramOptions{Spin: -time.Second}, "explore: Spin -1s: want 0 (the default, 1m) or more"},
	} {
		res := explore.SearchProgram(context.Background(), tc.n, tc.fn, tc.o)
		require.ErrorIs(t, res.Err, comm.ErrBadArgument)
		require.ErrorContains(t, res.Err, tc.want)
		require.Zero(t, res.Schedules)
	}
}

// A goroutine a rank started that is still working when the run returns
// is winding down, not leaked: the search yields to it until it ends,
// however long the host takes to run it (here it works 800 ms after its
// rank returned, longer than a bounded wait for leaks would give it), at
// the first, middle and last rank.
func TestSearchProgramWaitsForWindingDownHelpers(t *testing.T) {
	for _, r := range []int{0, 1, 2} {
		res := explore.SearchProgram(context.Background(), 3, func(ctx context.Context, c comm.Comm) error {
			if c.Rank() == r {
				go spin(800 * time.Millisecond)
			}
			return c.Barrier(ctx)
		}, explore.ProgramOptions{Seeds: 1})
		require.Nil(t, res.First, "rank %d's helper was named a leak while it worked: %v", r, res.First)
	}
}

// A goroutine another test starts while a search runs (here blocked until
// the search is over, so it is alive and waiting when the search looks for
// leaks) is not the search's: its creator was live before the run.
func TestSearchProgramIgnoresAnotherTestsGoroutine(t *testing.T) {
	mid, created, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Run("group", func(t *testing.T) {
		t.Run("bystander", func(t *testing.T) {
			t.Parallel()
			<-mid
			go func() { <-release }()
			close(created)
		})
		t.Run("search", func(t *testing.T) {
			t.Parallel()
			defer close(release)
			once := false
			res := explore.SearchProgram(context.Background(), 2, func(ctx context.Context, c comm.Comm) error {
				if c.Rank() == 0 && !once {
					once = true
					close(mid)
					<-created
				}
				return c.Barrier(ctx)
			}, explore.ProgramOptions{Seeds: 1})
			require.Nil(t, res.First, "another test's goroutine was taken for a leak: %v", res.First)
		})
	})
}
