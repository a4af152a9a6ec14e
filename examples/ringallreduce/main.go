// Command ringallreduce sums a vector over every rank with a ring written
// over point-to-point messages (a reduce-scatter, then an allgather, each
// n-1 steps of Sendrecv with the neighbours), and checks the result
// against the runtime's own Allreduce.
//
//	go run ./examples/ringallreduce                      # 4 goroutine ranks
//	go build -tags mpi -o ring ./examples/ringallreduce && mpirun -np 4 ./ring
//	go test ./examples/ringallreduce                     # every schedule in simulation
package main

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/launch"
)

func main() {
	os.Exit(launch.Main(launch.Options{Ranks: 4}, func(ctx context.Context, c comm.Comm) error {
		sum, err := program(ctx, c, 1000)
		if err == nil && c.Rank() == 0 {
			fmt.Printf("ring allreduce over %d ranks: %d elements, element 0 = %v, equal to comm.Allreduce\n", c.Size(), len(sum), sum[0])
		}
		return err
	}))
}

// program sums every rank's vector of n elements with ringAllreduce and
// checks it against comm.Allreduce.
func program(ctx context.Context, c comm.Comm, n int) ([]float64, error) {
	in := make([]float64, n)
	for i := range in {
		in[i] = float64(c.Rank()*n + i)
	}
	got, err := ringAllreduce(ctx, c, in)
	if err != nil {
		return nil, err
	}
	want := make([]float64, n)
	if err := comm.Allreduce(ctx, c, comm.Sum, in, want); err != nil {
		return nil, err
	}
	if !slices.Equal(got, want) {
		return nil, fmt.Errorf("rank %d: the ring's sum differs from Allreduce's", c.Rank())
	}
	return got, nil
}

// ringAllreduce returns the element-wise sum of in over c's ranks. The
// vector is cut into Size() chunks; in step s of the reduce-scatter rank r
// sends chunk r-s to its right neighbour and adds the chunk r-s-1 its left
// neighbour sends; after n-1 steps it holds the total of chunk r+1, and n-1
// steps of the allgather pass the totals round.
func ringAllreduce(ctx context.Context, c comm.Comm, in []float64) ([]float64, error) {
	n, r := c.Size(), c.Rank()
	out := slices.Clone(in)
	if n == 1 {
		return out, nil
	}
	bounds := func(k int) (int, int) {
		k = ((k % n) + n) % n
		return k * len(out) / n, (k + 1) * len(out) / n
	}
	right, left := (r+1)%n, (r+n-1)%n
	buf := make([]float64, len(out)/n+1)
	for s := range n - 1 {
		sl, sh := bounds(r - s)
		rl, rh := bounds(r - s - 1)
		if _, err := comm.Sendrecv(ctx, c, out[sl:sh], right, s, buf[:rh-rl], left, s); err != nil {
			return nil, err
		}
		for i := range rh - rl {
			out[rl+i] += buf[i]
		}
	}
	for s := range n - 1 {
		sl, sh := bounds(r + 1 - s)
		rl, rh := bounds(r - s)
		if _, err := comm.Sendrecv(ctx, c, out[sl:sh], right, n+s, buf[:rh-rl], left, n+s); err != nil {
			return nil, err
		}
		copy(out[rl:rh], buf[:rh-rl])
	}
	return out, nil
}
