package local_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
)

// Four goroutine ranks sum their ranks with an allreduce.
func ExampleRun() {
	err := local.Run(context.Background(), 4, local.Config{Checked: true}, func(ctx context.Context, c comm.Comm) error {
		out := []int64{0}
		if err := c.AllreduceInt64(ctx, comm.Sum, []int64{int64(c.Rank())}, out); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Println("sum of ranks:", out[0])
		}
		return nil
	})
	fmt.Println("error:", err)
	// Output:
	// sum of ranks: 6
	// error: <nil>
}

// Two ranks enter different collectives: checked mode reports a desync on
// every rank instead of hanging.
func ExampleRun_desync() {
	err := local.Run(context.Background(), 2, local.Config{Checked: true}, func(ctx context.Context, c comm.Comm) error {
		if c.Rank() == 0 {
			return c.Barrier(ctx)
		}
		var g comm.Gathered
		return c.AllgatherInt64s(ctx, []int64{1}, &g)
	})
	fmt.Println(errors.Is(err, comm.ErrDesync))
	// Output:
	// true
}
