package main

import (
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/explore"
	"github.com/rankrun/rankrun/explore/exploretest"
)

var unclamped = flag.Bool("unclamped", false, "TestSeedPollUnderEverySchedule: run the seed's bug (no clamp), to see the explorer's report and replay line")

// With the clamp no schedule finds an idle poll that sleeps out its
// interval. With -unclamped the explorer fails the test on the first
// schedule, naming the symptom, with the line that replays it:
//
//	go test ./examples/seedpoll -run TestSeedPollUnderEverySchedule -unclamped
func TestSeedPollUnderEverySchedule(t *testing.T) {
	o := explore.ProgramOptions{MinRanks: 1} // a failure shrinks to the fewest ranks that still fail
	if *unclamped {
		o.ReplayArgs = "-unclamped"
	}
	exploretest.Program(t, 4, func(ctx context.Context, c comm.Comm) error {
		_, err := program(ctx, c, 6, !*unclamped)
		return err
	}, o)
}

func TestSeedPollWithoutClampIsFound(t *testing.T) {
	res := explore.SearchProgram(context.Background(), 4, func(ctx context.Context, c comm.Comm) error {
		_, err := program(ctx, c, 6, false)
		return err
	}, explore.ProgramOptions{MinRanks: 1})
	if res.First == nil {
		t.Fatalf("the explorer did not find the unclamped poll in %d schedules", res.Schedules)
	}
	if msg := res.Smallest.Error(); !strings.Contains(msg, "slept out its whole 100ms interval (seed 000)") {
		t.Fatalf("the failure does not name the symptom: %s", msg)
	}
	t.Logf("found after %d schedules, smallest on %d ranks: %v", res.Schedules, res.Smallest.Ranks, res.Smallest)
	// The failing schedule replays: the same seed fails the same way.
	again := explore.SearchProgram(context.Background(), res.Smallest.Ranks, func(ctx context.Context, c comm.Comm) error {
		_, err := program(ctx, c, 6, false)
		return err
	}, explore.ProgramOptions{Seeds: 1, Start: res.Smallest.Seed, Strategy: &res.Smallest.Strategy})
	if again.First == nil || again.First.Error() != res.Smallest.Error() {
		t.Fatalf("the replay of seed %d did not fail alike: %v", res.Smallest.Seed, again.First)
	}
}
