// Command moedispatch routes tokens to experts the way MoE expert
// parallelism does: every rank holds some tokens and some experts; each
// token picks an expert (a hash of its id); an Alltoall of counts tells
// every rank how many tokens it will receive from each other rank, an
// Alltoallv sends the tokens (dispatch), each rank's experts process what
// arrived, and a second Alltoallv brings the results back (combine). Every
// token must come back to its rank processed by the expert it chose.
//
//	go run ./examples/moedispatch
//	go build -tags mpi -o moe ./examples/moedispatch && mpirun -np 4 ./moe
//	go test ./examples/moedispatch
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/launch"
)

func main() {
	os.Exit(launch.Main(launch.Options{Ranks: 4}, func(ctx context.Context, c comm.Comm) error {
		moved, err := dispatch(ctx, c, 64, 2)
		if err == nil && c.Rank() == 0 {
			fmt.Printf("moe dispatch over %d ranks, %d experts: rank 0 sent %d of its 64 tokens to other ranks and got every one back processed\n",
				c.Size(), 2*c.Size(), moved)
		}
		return err
	}))
}

// hidden is a token's width: its id, then hidden-1 features.
const hidden = 4

// expertOf is the expert token id goes to, of experts in all.
func expertOf(id, experts int) int { return int(uint32(id)*2654435761>>7) % experts }

// process is what expert e does to a token's features.
func process(e int, v float32) float32 { return v*2 + float32(e) }

// dispatch sends each of this rank's tokens to the rank that holds its
// expert (expertsPerRank experts each, expert e on rank e/expertsPerRank),
// processes what arrives, and combines the results back. It returns how
// many of its tokens left this rank.
func dispatch(ctx context.Context, c comm.Comm, tokens, expertsPerRank int) (int, error) {
	n, me := c.Size(), c.Rank()
	experts := n * expertsPerRank
	// Group my tokens by destination rank.
	byDest := make([][]float32, n)
	for t := range tokens {
		id := me*tokens + t
		dest := expertOf(id, experts) / expertsPerRank
		byDest[dest] = append(byDest[dest], float32(id), float32(t), float32(t*2), float32(t*3))
	}
	sendCounts := make([]int, n)
	var send []float32
	moved := 0
	for d, b := range byDest {
		sendCounts[d] = len(b)
		send = append(send, b...)
		if d != me {
			moved += len(b) / hidden
		}
	}
	// How much each rank will send me.
	sc64 := make([]int64, n)
	for d := range n {
		sc64[d] = int64(sendCounts[d])
	}
	rc64 := make([]int64, n)
	if err := comm.Alltoall(ctx, c, sc64, rc64); err != nil {
		return 0, err
	}
	recvCounts := make([]int, n)
	total := 0
	for s := range n {
		recvCounts[s] = int(rc64[s])
		total += recvCounts[s]
	}
	// Dispatch, process, combine.
	recv := make([]float32, total)
	if err := comm.Alltoallv(ctx, c, send, sendCounts, nil, recv, recvCounts, nil); err != nil {
		return 0, err
	}
	for at := 0; at < len(recv); at += hidden {
		id := int(recv[at])
		e := expertOf(id, experts)
		if e/expertsPerRank != me {
			return 0, fmt.Errorf("rank %d: token %d for expert %d (on rank %d) arrived here", me, id, e, e/expertsPerRank)
		}
		for f := 1; f < hidden; f++ {
			recv[at+f] = process(e, recv[at+f])
		}
	}
	back := make([]float32, len(send))
	if err := comm.Alltoallv(ctx, c, recv, recvCounts, nil, back, sendCounts, nil); err != nil {
		return 0, err
	}
	// Every token is back, in the order it left, processed by its expert.
	for at := 0; at < len(back); at += hidden {
		id := int(back[at])
		if id < me*tokens || id >= (me+1)*tokens {
			return 0, fmt.Errorf("rank %d: token %d came back here", me, id)
		}
		t := id - me*tokens
		e := expertOf(id, experts)
		for f, v := range []float32{float32(t), float32(t * 2), float32(t * 3)} {
			if back[at+1+f] != process(e, v) {
				return 0, fmt.Errorf("rank %d: token %d feature %d came back %v, want %v", me, id, f, back[at+1+f], process(e, v))
			}
		}
	}
	return moved, nil
}
