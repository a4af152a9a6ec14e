package local_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
)

// A checked collective whose stamps differ (the round combines nothing)
// leaves the caller's output as it was, instead of the previous round's
// result, and every rank gets ErrDesync. (Found by review: the local
// collectives copied the last result out regardless.)
func TestStampedDesyncLeavesOutputUntouched(t *testing.T) {
	err := local.Run(context.Background(), 2, local.Config{Checked: true, Timeout: 5 * time.Second}, func(ctx context.Context, c comm.Comm) error {
		out := []int64{0}
		if err := c.AllreduceInt64(ctx, comm.Sum, []int64{21}, out); err != nil {
			return err
		}
		var g comm.Gathered
		if err := c.AllgatherInt64s(ctx, []int64{7}, &g); err != nil {
			return err
		}
		out[0] = -1
		var err error
		if c.Rank() == 0 {
			err = c.AllreduceInt64(ctx, comm.Sum, []int64{1}, out) // one call site
		} else {
			err = c.AllreduceInt64(ctx, comm.Sum, []int64{1}, out) // another
		}
		if !errors.Is(err, comm.ErrDesync) {
			return fmt.Errorf("rank %d: %v, want ErrDesync", c.Rank(), err)
		}
		if out[0] != -1 {
			return fmt.Errorf("rank %d: out after the desync is %d (the previous round's result), want it untouched (-1)", c.Rank(), out[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
