// Command dataparallel trains a linear model y = w.x with data parallelism:
// each rank holds a shard of the samples, computes its gradient, and one
// Allreduce of float32 gradients per step makes every rank take the same
// step. Every rank must end with the same weights, and the loss must fall.
//
//	go run ./examples/dataparallel
//	go build -tags mpi -o dp ./examples/dataparallel && mpirun -np 4 ./dp
//	go test ./examples/dataparallel
package main

import (
	"context"
	"fmt"
	"math"
	"os"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/launch"
)

func main() {
	os.Exit(launch.Main(launch.Options{Ranks: 4}, func(ctx context.Context, c comm.Comm) error {
		first, last, err := train(ctx, c, 50)
		if err == nil && c.Rank() == 0 {
			fmt.Printf("data parallel over %d ranks: loss %.4f -> %.6f in 50 steps, weights equal on every rank\n", c.Size(), first, last)
		}
		return err
	}))
}

const dim = 8

// truth is the model the samples come from.
func truth(j int) float32 { return float32(j+1) / dim }

// sample is the i-th sample of the whole data set (every rank can make
// any of them; a rank uses its own shard).
func sample(i int) (x [dim]float32, y float32) {
	for j := range x {
		x[j] = float32((i*7+j*3)%11) / 11
		y += truth(j) * x[j]
	}
	return x, y
}

// train runs steps of gradient descent over 64 samples per rank and returns
// the global loss before the first step and after the last.
func train(ctx context.Context, c comm.Comm, steps int) (first, last float64, err error) {
	const perRank, lr = 64, 0.5
	w := make([]float32, dim)
	grad := make([]float32, dim+1) // the gradient, and the loss in the last slot
	sum := make([]float32, dim+1)
	total := float32(perRank * c.Size())
	for s := 0; s <= steps; s++ {
		clear(grad)
		for k := range perRank {
			x, y := sample(c.Rank()*perRank + k)
			var pred float32
			for j := range dim {
				pred += w[j] * x[j]
			}
			e := pred - y
			for j := range dim {
				grad[j] += e * x[j]
			}
			grad[dim] += e * e
		}
		if err := comm.Allreduce(ctx, c, comm.Sum, grad, sum); err != nil {
			return 0, 0, err
		}
		loss := float64(sum[dim] / total)
		if s == 0 {
			first = loss
		}
		last = loss
		if s == steps {
			break
		}
		for j := range dim {
			w[j] -= lr * sum[j] / total
		}
	}
	// Every rank must have taken the same steps: compare the weights.
	min, max := make([]float32, dim), make([]float32, dim)
	if err := comm.Allreduce(ctx, c, comm.Min, w, min); err != nil {
		return 0, 0, err
	}
	if err := comm.Allreduce(ctx, c, comm.Max, w, max); err != nil {
		return 0, 0, err
	}
	for j := range dim {
		if min[j] != max[j] {
			return 0, 0, fmt.Errorf("rank %d: weight %d differs between ranks: %v..%v", c.Rank(), j, min[j], max[j])
		}
	}
	if !(last < first/10) || math.IsNaN(last) {
		return 0, 0, fmt.Errorf("rank %d: the loss did not fall: %v -> %v", c.Rank(), first, last)
	}
	return first, last, nil
}
