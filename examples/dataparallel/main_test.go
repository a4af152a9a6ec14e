package main

import (
	"context"
	"testing"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/explore"
	"github.com/rankrun/rankrun/explore/exploretest"
)

// Whatever the schedule, every rank takes the same steps (train compares
// the weights across ranks) and the loss falls.
func TestDataParallelUnderEverySchedule(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		exploretest.Program(t, n, func(ctx context.Context, c comm.Comm) error {
			_, _, err := train(ctx, c, 20)
			return err
		}, explore.ProgramOptions{Seeds: 20})
	}
}
