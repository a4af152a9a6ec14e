package main

import (
	"context"
	"testing"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/explore"
	"github.com/rankrun/rankrun/explore/exploretest"
)

// The ring sums like comm.Allreduce on 1 to 5 ranks, whatever the
// schedule (program checks it on every rank), and leaves no message behind.
func TestRingAllreduceUnderEverySchedule(t *testing.T) {
	for n := 1; n <= 5; n++ {
		exploretest.Program(t, n, func(ctx context.Context, c comm.Comm) error {
			_, err := program(ctx, c, 37)
			return err
		}, explore.ProgramOptions{Seeds: 40})
	}
}
