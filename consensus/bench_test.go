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

// benchViews gives each of n ranks size terminal sessions, half of them
// shared (ranks disagree on the other half), a few cancelled or failed.
func benchViews(n, size int) [][]int64 {
	out := make([][]int64, n)
	for r := range n {
		for i := range size {
			st := Completed
			switch {
			case i < size/64:
				st = Cancelled
			case i < size/32:
				st = Failed
			}
			out[r] = append(out[r], Word(uint64(i*2+r%2), st, true))
		}
	}
	return out
}

// BenchmarkAgreeScripted is the Gatherer's own cost for a two-hop scope
// (encode, check, fold), with the peers scripted: no backend.
func BenchmarkAgreeScripted(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("hops=2/ids=%d", size), func(b *testing.B) {
			vs := benchViews(3, size)
			tp := &scriptComm{rank: 0, size: 2, name: "tp", peers: [][]int64{nil, vote(vs[1]...)}}
			pp := &scriptComm{rank: 0, size: 2, name: "pp", peers: [][]int64{nil, vote(vs[2]...)}}
			scope := []comm.Comm{tp, pp}
			var g Gatherer
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Agree(ctx, scope, vs[0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAgreeLocal is one status check's consensus on every rank of an
// in-process world of 4 ranks as TP 2 x PP 2, unchecked and checked.
// ns/op is per check, all ranks together; world startup is included but
// amortised over b.N.
func BenchmarkAgreeLocal(b *testing.B) {
	for _, checked := range []bool{false, true} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("checked=%v/ranks=4/hops=2/ids=%d", checked, size), func(b *testing.B) {
				vs := benchViews(4, size)
				n := b.N
				b.ReportAllocs()
				b.ResetTimer()
				err := local.Run(context.Background(), 4, local.Config{Checked: checked}, func(ctx context.Context, world comm.Comm) error {
					scope, err := topo{4, 2}.scope(ctx, world, "hops")
					if err != nil {
						return err
					}
					var g Gatherer
					for range n {
						if _, err := g.Agree(ctx, scope, vs[world.Rank()]); err != nil {
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
