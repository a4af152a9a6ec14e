//go:build mpi

package mpi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
)

// splitWorld returns a fresh communicator of every world rank (collectives
// of earlier tests cannot pair with its own) with its collectives bounded
// by timeout.
func splitWorld(t *testing.T, timeout time.Duration) *mpiComm {
	t.Helper()
	sub, err := testWorld.Raw().Split(context.Background(), 0, testWorld.Rank())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	c := sub.(*mpiComm)
	c.timeout = timeout
	return c
}

func TestDirectCollectivesUsed(t *testing.T) {
	c := testWorld.Raw().(*mpiComm)
	if want := c.size <= directMax; c.direct != want {
		t.Fatalf("world of %d ranks: direct = %v, want %v", c.size, c.direct, want)
	}
}

// TestDirectAllgatherOverflow: contributions longer than one inline message
// (C.RR_INLINE values) travel as a header and an overflow message; every
// mix of short, inline-sized and long contributions arrives intact.
func TestDirectAllgatherOverflow(t *testing.T) {
	c := splitWorld(t, 20*time.Second)
	ctx := context.Background()
	sizes := []int{0, 1, inlineValues, inlineValues + 1, 1000, 5000}
	contribution := func(r, k int) []int64 {
		v := make([]int64, sizes[(r+k)%len(sizes)])
		for i := range v {
			v[i] = int64(r)<<40 | int64(k)<<20 | int64(i)
		}
		return v
	}
	var g comm.Gathered
	for k := range 2 * len(sizes) {
		if err := c.AllgatherInt64s(ctx, contribution(c.rank, k), &g); err != nil {
			t.Fatalf("round %d: %v", k, err)
		}
		for r := range c.size {
			if got, want := g.Of(r), contribution(r, k); !slices.Equal(got, want) {
				t.Fatalf("round %d: rank %d's contribution: %d values starting %v, want %d starting %v",
					k, r, len(got), got[:min(3, len(got))], len(want), want[:min(3, len(want))])
			}
		}
	}
	// Large allreduces take the direct path too.
	in := make([]int64, 3000)
	for i := range in {
		in[i] = int64(i * (c.rank + 1))
	}
	out := make([]int64, len(in))
	if err := c.AllreduceInt64(ctx, comm.Sum, in, out); err != nil {
		t.Fatal(err)
	}
	for i, v := range out {
		if want := int64(i * c.size * (c.size + 1) / 2); v != want {
			t.Fatalf("allreduce[%d] = %d, want %d", i, v, want)
		}
	}
}

// TestUncheckedDesyncNamed: in unchecked mode, ranks that enter different
// direct collectives (or the same one with different shapes) each get an
// error wrapping comm.ErrDesync that names the peer and both operations,
// at once rather than at the timeout; the group is broken afterwards.
func TestUncheckedDesyncNamed(t *testing.T) {
	if testWorld.Size() < 2 {
		t.Skip("needs 2 ranks")
	}
	for _, tc := range []struct {
		name    string
		odd     func(ctx context.Context, c comm.Comm) error // rank 0
		rest    func(ctx context.Context, c comm.Comm) error // the others
		want    []string
		oddSees bool // rank 0 receives in its collective, so it sees the desync too
	}{
		{"kinds", func(ctx context.Context, c comm.Comm) error { return c.Barrier(ctx) },
			func(ctx context.Context, c comm.Comm) error {
				return c.AllreduceInt64(ctx, comm.Sum, []int64{1}, []int64{0})
			}, []string{"Barrier #1", "Allreduce #1 (count 1, sum)"}, true},
		{"counts", func(ctx context.Context, c comm.Comm) error {
			return c.AllreduceInt64(ctx, comm.Max, []int64{1}, []int64{0})
		}, func(ctx context.Context, c comm.Comm) error {
			return c.AllreduceInt64(ctx, comm.Max, []int64{1, 2}, []int64{0, 0})
		}, []string{"count 1, max", "count 2, max"}, true},
		{"ops", func(ctx context.Context, c comm.Comm) error {
			return c.AllreduceInt64(ctx, comm.Min, []int64{1}, []int64{0})
		}, func(ctx context.Context, c comm.Comm) error {
			return c.AllreduceInt64(ctx, comm.Max, []int64{1}, []int64{0})
		}, []string{"count 1, min", "count 1, max"}, true},
		{"allgather vs allreduce", func(ctx context.Context, c comm.Comm) error {
			var g comm.Gathered
			return c.AllgatherInt64s(ctx, []int64{1, 2, 3}, &g)
		}, func(ctx context.Context, c comm.Comm) error {
			return c.AllreduceInt64(ctx, comm.Sum, []int64{1}, []int64{0})
		}, []string{"Allgather #1", "Allreduce #1"}, true},
		// A Bcast root only sends: it completes, and only its peers see the
		// desync (its next collective then times out).
		{"bcast root vs allreduce", func(ctx context.Context, c comm.Comm) error {
			_, err := c.Bcast(ctx, 0, []byte("intake"))
			return err
		}, func(ctx context.Context, c comm.Comm) error {
			return c.AllreduceInt64(ctx, comm.Sum, []int64{1}, []int64{0})
		}, []string{"Bcast #1 (6 bytes)"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := splitWorld(t, 10*time.Second)
			ctx := context.Background()
			start := time.Now()
			var err error
			if c.rank == 0 {
				err = tc.odd(ctx, c)
			} else {
				err = tc.rest(ctx, c)
			}
			d := time.Since(start)
			if c.rank == 0 && !tc.oddSees {
				if err != nil {
					t.Errorf("rank 0: %v, want nil (it only sent)", err)
				}
				if err := testWorld.Raw().Barrier(ctx); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, comm.ErrDesync) {
				t.Fatalf("rank %d: %v, want ErrDesync", c.rank, err)
			}
			t.Logf("rank %d: %v", c.rank, err)
			if d > 5*time.Second {
				t.Errorf("rank %d: desync reported after %v", c.rank, d)
			}
			msg := err.Error()
			named := false
			for _, w := range tc.want {
				named = named || strings.Contains(msg, w)
			}
			if !named || !strings.Contains(msg, fmt.Sprintf("group %q", c.name)) {
				t.Errorf("rank %d: %q names neither of %q, or not the group", c.rank, msg, tc.want)
			}
			if err := c.Barrier(ctx); !errors.Is(err, comm.ErrBroken) {
				t.Errorf("rank %d: collective after a desync: %v, want ErrBroken", c.rank, err)
			}
			if err := testWorld.Raw().Barrier(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
