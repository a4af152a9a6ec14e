//go:build mpi

package mpi

import (
	"context"
	"fmt"
	"time"

	"testing"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/consensus"
)

// BenchmarkStatusVsBare is the status-check goal under mpirun, in
// one job: alternating chunks of (a) the bare AllgatherInt64s of ids values
// per rank, (b) the status check's consensus (consensus.Gatherer.Agree) of
// ids terminal sessions per rank, disjoint between ranks (nothing ready:
// the steady state of a rank holding transfers its peers have not
// finished), and (c) the same Agree in checked mode. Reported: the median
// over chunks of check/bare and checked/unchecked.
func BenchmarkStatusVsBare(b *testing.B) {
	raw := testWorld.Raw()
	chk := comm.NewChecked(raw, comm.CheckConfig{Timeout: time.Minute})
	ctx := context.Background()
	for _, ids := range []int{0, 64, 1024} {
		b.Run(fmt.Sprintf("ids=%d", ids), func(b *testing.B) {
			bare := make([]int64, ids)
			words := make([]int64, ids)
			for i := range ids {
				id := uint64(1_000_000 + raw.Rank()*ids + i)
				bare[i] = int64(id)
				words[i] = consensus.Word(id, consensus.Cancelled, true)
			}
			var g comm.Gathered
			var ga, gc consensus.Gatherer
			scope, scopeChecked := []comm.Comm{raw}, []comm.Comm{chk}
			const chunk = 500
			loops := []func() error{
				func() error { return raw.AllgatherInt64s(ctx, bare, &g) },
				func() error { _, err := ga.Agree(ctx, scope, words); return err },
				func() error { _, err := gc.Agree(ctx, scopeChecked, words); return err },
			}
			var checkOverBare, checkedOverCheck, bareNs []float64
			for i := range b.N {
				var t [3]time.Duration
				for k := range 3 {
					j := (k + i) % 3 // rotate the order: load moves all three alike
					if err := raw.Barrier(ctx); err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					for range chunk {
						if err := loops[j](); err != nil {
							b.Fatal(err)
						}
					}
					t[j] = time.Since(t0)
				}
				checkOverBare = append(checkOverBare, float64(t[1])/float64(t[0]))
				checkedOverCheck = append(checkedOverCheck, float64(t[2])/float64(t[1]))
				bareNs = append(bareNs, float64(t[0].Nanoseconds())/chunk)
			}
			b.ReportMetric(median(checkOverBare), "check/bare")
			b.ReportMetric(median(checkedOverCheck), "checked/unchecked")
			b.ReportMetric(median(bareNs), "bare-ns/op")
		})
	}
}
