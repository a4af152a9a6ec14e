package explore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/explore"
)

// pollThenBranch is the seeds' bug in its purest form: each rank sends to
// its right neighbour and posts a receive from its left one, the ranks
// meet in a barrier, and each then looks, rank-locally (Test), whether its
// message arrived: if it did the rank enters an allreduce, if not a
// barrier. On a real machine the message arrives before one rank's look
// and after another's; with branch false every rank enters the allreduce.
func pollThenBranch(branch bool) func(ctx context.Context, c comm.Comm) error {
	return func(ctx context.Context, c comm.Comm) error {
		n, r := c.Size(), c.Rank()
		in := make([]byte, 8)
		rq, err := c.Irecv(in, (r+n-1)%n, 7)
		if err != nil {
			return err
		}
		sq, err := c.Isend(make([]byte, 8), (r+1)%n, 7)
		if err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		_, arrived, err := rq.Test()
		if err != nil {
			return err
		}
		if arrived || !branch {
			if err := c.AllreduceInt64(ctx, comm.Sum, []int64{1}, make([]int64, 1)); err != nil { // the "arrived" branch
				return err
			}
		} else if err := c.Barrier(ctx); err != nil { // the "not yet" branch
			return err
		}
		if _, err := rq.Wait(ctx); err != nil {
			return err
		}
		_, err = sq.Wait(ctx)
		return err
	}
}

// The search lets what a rank observes locally differ between ranks: a
// program whose ranks branch on a rank-local Test into different
// collectives is found within the default 200 schedules, and its failure
// names both call sites; the same program without the branch passes every
// schedule. With arrivals fixed to the link model (the search before),
// every rank's look sees "not yet" and the bug is never found.
func TestSearchFindsABranchOnALocalTest(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{2, 3, 4} {
		res := explore.SearchProgram(ctx, n, pollThenBranch(true), explore.ProgramOptions{})
		require.NoError(t, res.Err)
		require.NotNil(t, res.First, "%d ranks: a branch on a rank-local Test was not found in %d schedules", n, res.Schedules)
		msg := res.First.Error()
		require.Contains(t, msg, "collective desync")
		require.Contains(t, msg, "localtest_test.go:39", "%d ranks: the allreduce's call site is not named: %s", n, msg)
		require.Contains(t, msg, "localtest_test.go:42", "%d ranks: the barrier's call site is not named: %s", n, msg)
		t.Logf("%d ranks: found after %d schedules", n, res.Schedules)

		clean := explore.SearchProgram(ctx, n, pollThenBranch(false), explore.ProgramOptions{})
		require.NoError(t, clean.Err)
		require.Nil(t, clean.First, "%d ranks: the program without the branch failed", n)
		require.Equal(t, 200, clean.Schedules)

		fixed := explore.SearchProgram(ctx, n, pollThenBranch(true), explore.ProgramOptions{FixedArrivals: true, Seeds: 50})
		require.Nil(t, fixed.First, "%d ranks: with fixed arrivals a look was expected never to see the message", n)
	}
}
