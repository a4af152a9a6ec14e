//go:build mpi

package mpixfer

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/mpi"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

var world *mpi.World

func TestMain(m *testing.M) {
	w, err := mpi.Init(mpi.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpixfer:", err)
		os.Exit(2)
	}
	world = w
	os.Exit(w.Finalize(m.Run()))
}

// model: 8 layers, 8 KV heads of 128 x 2 bytes, 16 tokens per block:
// 512 KiB per block on a tp=1 rank; 2048 tokens are 64 MiB.
var model = topology.Model{Layers: 8, KVHeads: 8, HeadDim: 128, TokensPerBlock: 16, ElemBytes: 2}

const tokens = 2048

// rank is one side of the transfer.
type rank struct {
	c     comm.Comm
	role  topology.Role
	shard topology.Shard
	pool  *kvpool.Pool
	tr    *transceiver.Transceiver
	next  request.ID
}

func newRank(c comm.Comm, v transceiver.Verify) (*rank, error) {
	ctxL, genL := topology.MustParseLayout("tp=1"), topology.MustParseLayout("tp=1")
	r := &rank{c: c, role: topology.Context}
	if c.Rank() == 1 {
		r.role = topology.Generation
	}
	var err error
	if r.shard, err = ctxL.Shard(model, 0); err != nil {
		return nil, err
	}
	if r.pool, err = kvpool.NewPool(kvpool.PoolConfig{Blocks: model.Blocks(tokens), BlockBytes: r.shard.BlockBytes()}); err != nil {
		return nil, err
	}
	r.tr, err = transceiver.New(transceiver.Config{Role: r.role, Ctx: ctxL, Gen: genL, Model: model, Rank: 0, World: c,
		Pool: r.pool, TransferTimeout: time.Hour, Verify: v})
	return r, err
}

// transfer moves one request, timed on rank 0 from the barrier to its reap.
func (r *rank) transfer(ctx context.Context) (time.Duration, error) {
	r.next++
	q := transceiver.Request{ID: r.next, Tokens: tokens}
	ids, err := r.pool.TryAllocate(q.ID, r.shard.BlocksFor(tokens))
	if err != nil {
		return 0, err
	}
	if r.role == topology.Generation {
		err = r.tr.StartReceive(q)
	} else {
		for j, id := range ids {
			transceiver.FillBlock(r.pool.Block(id), r.shard, uint64(q.ID), j)
		}
	}
	if err != nil {
		return 0, err
	}
	if err := r.c.Barrier(ctx); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if r.role == topology.Context {
		if err := r.tr.StartSend(q); err != nil {
			return 0, err
		}
	}
	for {
		var res transceiver.Result
		if r.role == topology.Context {
			res, err = r.tr.CheckContextTransferStatus(ctx, 1)
		} else {
			res, err = r.tr.CheckGenTransferStatus(ctx, 1)
		}
		if err != nil {
			return 0, err
		}
		if len(res.Reaped) == 1 {
			if x := res.Reaped[0]; x.Status != request.Completed {
				return 0, fmt.Errorf("%s: request %d %s: %s", r.role, x.ID, x.Status, x.Reason)
			}
			break
		}
	}
	d := time.Since(t0)
	return d, r.pool.Release(q.ID)
}

// bare is the reference: 64 MiB from rank 0 to rank 1 in one Isend/Irecv
// and an 8-byte reply, timed like transfer.
func bare(ctx context.Context, c comm.Comm, buf, ack []byte) (time.Duration, error) {
	if err := c.Barrier(ctx); err != nil {
		return 0, err
	}
	t0 := time.Now()
	var q, a comm.Request
	var err error
	if c.Rank() == 0 {
		if q, err = c.Isend(buf, 1, 7); err == nil {
			a, err = c.Irecv(ack, 1, 8)
		}
	} else {
		if q, err = c.Irecv(buf, 0, 7); err == nil {
			if _, err = q.Wait(ctx); err == nil {
				a, err = c.Isend(ack, 0, 8)
			}
		}
	}
	if err != nil {
		return 0, err
	}
	if _, err := q.Wait(ctx); err != nil {
		return 0, err
	}
	if _, err := a.Wait(ctx); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// BenchmarkTransferVsP2P alternates, b.N times, one bare Isend/Irecv of
// 64 MiB and one transfer of the same bytes (half of the pairs bare first)
// for each verification mode, in the same processes, and reports the median
// and best of the per-pair bandwidth ratios (xfer/p2p). Load on a shared
// machine moves both halves of a pair alike.
func BenchmarkTransferVsP2P(b *testing.B) {
	c := world.Raw()
	if c.Size() != 2 {
		b.Skipf("needs mpirun -np 2 (world of %d)", c.Size())
	}
	for _, v := range []transceiver.Verify{transceiver.VerifyFull, transceiver.VerifyChecksum, transceiver.VerifyOff} {
		b.Run("verify="+v.String(), func(b *testing.B) {
			ctx := context.Background()
			r, err := newRank(c, v)
			if err != nil {
				b.Fatal(err)
			}
			defer r.tr.Close()
			buf, ack := make([]byte, 64<<20), make([]byte, 8)
			// Warm-up: pools, buffers, page faults on both paths.
			for range 2 {
				if _, err := r.transfer(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := bare(ctx, c, buf, ack); err != nil {
					b.Fatal(err)
				}
			}
			var ratios []float64
			var xt, bt time.Duration
			b.ResetTimer()
			for i := range b.N {
				var dx, db time.Duration
				if i%2 == 0 {
					db, err = bare(ctx, c, buf, ack)
					if err == nil {
						dx, err = r.transfer(ctx)
					}
				} else {
					dx, err = r.transfer(ctx)
					if err == nil {
						db, err = bare(ctx, c, buf, ack)
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				xt, bt = xt+dx, bt+db
				ratios = append(ratios, float64(db)/float64(dx))
			}
			b.StopTimer()
			slices.Sort(ratios)
			mid := ratios[len(ratios)/2]
			if len(ratios)%2 == 0 { // pairs alternate their order: take both middles
				mid = (ratios[len(ratios)/2-1] + mid) / 2
			}
			b.ReportMetric(mid, "xfer/p2p")
			b.ReportMetric(ratios[len(ratios)-1], "xfer/p2p-best")
			b.ReportMetric(ratios[0], "xfer/p2p-worst")
			b.ReportMetric(float64(64<<20)/(float64(xt)/float64(b.N))*1e3, "xfer-MB/s")
			b.ReportMetric(float64(64<<20)/(float64(bt)/float64(b.N))*1e3, "p2p-MB/s")
			st := r.tr.Stats()
			if r.role == topology.Generation && v != transceiver.VerifyOff && st.BytesVerified != st.BytesReceived {
				b.Fatalf("verified %d of %d bytes", st.BytesVerified, st.BytesReceived)
			}
		})
	}
}
