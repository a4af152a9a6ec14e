package consensus

import (
	"context"
	"fmt"
	"testing"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
)

var benchSizes = []int{0, 64, 1024}

const benchRanks = 4

// benchVotes gives each of n ranks size ids per list, mostly shared, in
// descending order so normalization has work to do.
func benchVotes(n, size int) ([][]uint64, []Vote) {
	ready := make([][]uint64, n)
	votes := make([]Vote, n)
	for r := range n {
		var ids []uint64
		for i := size - 1; i >= 0; i-- {
			ids = append(ids, uint64(i*2+r%2)) // ranks disagree on half the ids
		}
		ready[r] = ids
		votes[r] = Vote{
			Cancelled: ids[:size/64],
			Failed:    ids[size/64 : size/32],
			Completed: ids,
			Quiesced:  ids,
		}
	}
	return ready, votes
}

func BenchmarkReady(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("ranks=%d/ids=%d", benchRanks, size), func(b *testing.B) {
			ready, _ := benchVotes(benchRanks, size)
			b.ReportAllocs()
			for b.Loop() {
				Ready(ready)
			}
		})
	}
}

func BenchmarkDecide(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("ranks=%d/ids=%d", benchRanks, size), func(b *testing.B) {
			_, votes := benchVotes(benchRanks, size)
			b.ReportAllocs()
			for b.Loop() {
				Decide(votes)
			}
		})
	}
}

// BenchmarkGatherScripted is the Gatherer's own cost for a two-hop scope
// (encode, decode, fold), with the peers scripted: no backend.
func BenchmarkGatherScripted(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("hops=2/ids=%d", size), func(b *testing.B) {
			_, votes := benchVotes(3, size)
			tp := &scriptComm{rank: 0, size: 2, name: "tp", peers: [][]int64{nil, encodeVote(votes[1])}}
			pp := &scriptComm{rank: 0, size: 2, name: "pp", peers: [][]int64{nil, encodeVote(votes[2])}}
			scope := []comm.Comm{tp, pp}
			var g Gatherer
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Outcome(ctx, scope, votes[0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGatherLocal is one status check's consensus (ReadyIDs then
// Outcome) on every rank of an in-process world of 4 ranks as TP 2 x PP 2,
// unchecked and checked. ns/op is per check, all ranks together; world
// startup is included but amortised over b.N.
func BenchmarkGatherLocal(b *testing.B) {
	for _, checked := range []bool{false, true} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("checked=%v/ranks=4/hops=2/ids=%d", checked, size), func(b *testing.B) {
				ready, votes := benchVotes(4, size)
				n := b.N
				b.ReportAllocs()
				b.ResetTimer()
				err := local.Run(context.Background(), 4, local.Config{Checked: checked}, func(ctx context.Context, world comm.Comm) error {
					scope, err := topo{4, 2}.scope(ctx, world, "hops")
					if err != nil {
						return err
					}
					r := world.Rank()
					var g Gatherer
					for range n {
						if _, err := g.ReadyIDs(ctx, scope, ready[r]); err != nil {
							return err
						}
						if _, err := g.Outcome(ctx, scope, votes[r]); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
