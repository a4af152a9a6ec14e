package main

import (
	"context"
	"testing"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/explore"
	"github.com/rankrun/rankrun/explore/exploretest"
)

// Every token reaches the rank of its expert and comes back processed, on
// 1 to 5 ranks, whatever the schedule.
func TestMoEDispatchUnderEverySchedule(t *testing.T) {
	for n := 1; n <= 5; n++ {
		exploretest.Program(t, n, func(ctx context.Context, c comm.Comm) error {
			_, err := dispatch(ctx, c, 24, 2)
			return err
		}, explore.ProgramOptions{Seeds: 30})
	}
}
