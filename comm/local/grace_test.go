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

// The checked layer bounds a collective itself when its timeout is
// shorter than the backend's (here 300 ms over an hour's): a caller's grace
// extends that bound too. The last rank does 600 ms of rank-local work
// before the allreduce; its peers, entering at once with a grace of 1.2 s,
// wait for it. Without the grace (the second run) they time out at 300 ms.
func TestCheckedGraceOverALongerBackendBound(t *testing.T) {
	const bound = 300 * time.Millisecond
	run := func(grace time.Duration) error {
		return errors.Join(local.RunAll(context.Background(), 3, local.Config{Timeout: time.Hour}, func(ctx context.Context, raw comm.Comm) error {
			c := comm.NewChecked(raw, comm.CheckConfig{Timeout: bound})
			if c.Rank() == c.Size()-1 {
				time.Sleep(2 * bound) // rank-local work, wall time (in-process)
			}
			out := make([]int64, 1)
			if err := c.AllreduceInt64(comm.WithGrace(ctx, grace), comm.Sum, []int64{1}, out); err != nil {
				return err
			}
			if out[0] != 3 {
				return fmt.Errorf("sum %d, want 3", out[0])
			}
			return nil
		})...)
	}
	if err := run(4 * bound); err != nil {
		t.Fatalf("with a grace of %v over a checked bound of %v: %v", 4*bound, bound, err)
	}
	if err := run(0); !errors.Is(err, comm.ErrCollectiveTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("without a grace the checked bound of %v must end the wait: %v", bound, err)
	}
}
