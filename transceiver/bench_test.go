package transceiver_test

// Benchmarks of the transfer layer, in-process (comm/local). Every figure
// has a reference measured in the same run, on the same backend:
//
//   - BenchmarkConsensusRound: one status check with at_least 0 on every
//     rank of a CTX TP group, each rank holding ids sessions that it sees as
//     terminal (cancelled on that rank only, so the group never agrees on
//     them and they stay held: every check gathers the same ids again),
//     "check", next to "bare": one AllgatherInt64s of the same ids on the
//     same group communicator.
//   - BenchmarkCheckScaling: the same check with sessions in flight (not
//     terminal: a ready list of 0 ids, but every session is pumped), as the
//     in-flight count and the number of ranks grow; B/session is what
//     StartSend allocates per session.
//   - BenchmarkTransfer: one request's KV from CTX tp=1 to GEN tp=4 (one
//     fragment of 1 MiB or 64 MiB per GEN rank: pack, send, verify every
//     byte, unpack, acknowledge, reap), each request paired with a copy()
//     of the same CTX blocks (xfer/copy: the median over pairs),
//     next to "p2p" (Isend/Irecv of the same messages plus an 8-byte
//     acknowledgement) and "memmove" (a copy() loop over two clean buffers
//     of the same size); BenchmarkTransferParts breaks the work down.
//
// Run them with scripts/bench.sh (make bench) or
// go test -run '^$' -bench . ./transceiver/.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/local"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// benchRank is what a benchmark body gets on each rank.
type benchRank struct {
	tr     *transceiver.Transceiver
	pool   *kvpool.Pool
	groups *groups
	world  comm.Comm
	role   topology.Role
	shard  topology.Shard
}

type benchOpts struct {
	ctx, gen  string
	model     topology.Model
	ctxBlocks int
	genBlocks int
	checked   bool
	verify    transceiver.Verify
	faults    func(role topology.Role, rank int) *transceiver.Faults
	noXcvr    bool // groups only, no transceiver
}

// withRanks runs body on every rank of an in-process world for the two
// layouts. Sessions left held are the benchmark's business: Close errors
// about them are ignored.
func withRanks(b *testing.B, o benchOpts, body func(ctx context.Context, r *benchRank) error) {
	b.Helper()
	ctxL := topology.MustParseLayout(o.ctx)
	genL := topology.MustParseLayout(o.gen)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	err := local.Run(ctx, ctxL.Ranks()+genL.Ranks(), local.Config{Checked: o.checked, Timeout: time.Minute}, func(ctx context.Context, c comm.Comm) error {
		g, err := setupGroups(ctx, c, ctxL, genL)
		if err != nil {
			return err
		}
		defer g.Close()
		r := &benchRank{groups: g, world: c, role: g.Role}
		if o.noXcvr {
			return body(ctx, r)
		}
		layout, blocks := ctxL, o.ctxBlocks
		if g.Role == topology.Generation {
			layout, blocks = genL, o.genBlocks
		}
		if r.shard, err = layout.Shard(o.model, g.Rank); err != nil {
			return err
		}
		if r.pool, err = kvpool.NewPool(kvpool.PoolConfig{Blocks: blocks, BlockBytes: r.shard.BlockBytes(), Name: g.Role.String()}); err != nil {
			return err
		}
		var faults *transceiver.Faults
		if o.faults != nil {
			faults = o.faults(g.Role, g.Rank)
		}
		r.tr, err = transceiver.New(transceiver.Config{Role: g.Role, Ctx: ctxL, Gen: genL, Model: o.model, Rank: g.Rank,
			World: c, Scope: g.Scope, Pool: r.pool, SenderWaitSlice: time.Second, GenPollInterval: time.Second,
			TransferTimeout: time.Hour, Faults: faults, Verify: o.verify})
		if err != nil {
			return err
		}
		defer func() { _ = r.tr.Close() }()
		return body(ctx, r)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// tinyModel: one byte-cheap block per request; 64 heads so that up to 64
// CTX TP ranks each hold (and send) a distinct head.
var tinyModel = topology.Model{Layers: 1, KVHeads: 64, HeadDim: 1, TokensPerBlock: 1, ElemBytes: 2}

// idle keeps a GEN rank answering control messages until every CTX rank
// is done.
func idle(ctx context.Context, r *benchRank, done *atomic.Int64, want int64) error {
	for done.Load() < want && ctx.Err() == nil {
		if r.tr != nil {
			r.tr.Pump()
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

// timed runs iters of step on every CTX rank after a warm-up and a
// barrier over the CTX TP group, timing from CTX rank 0.
func timed(ctx context.Context, b *testing.B, r *benchRank, group comm.Comm, step func() error) error {
	for range 10 {
		if err := step(); err != nil {
			return err
		}
	}
	if err := group.Barrier(ctx); err != nil {
		return err
	}
	if r.groups.Rank == 0 {
		b.ResetTimer()
	}
	for range b.N {
		if err := step(); err != nil {
			return err
		}
	}
	if r.groups.Rank == 0 {
		b.StopTimer()
	}
	return nil
}

const heldBase = 1_000_000

func BenchmarkConsensusRound(b *testing.B) {
	for _, ranks := range []int{2, 4} {
		for _, ids := range []int{0, 64, 1024} {
			b.Run(fmt.Sprintf("ranks=%d/ids=%d/check", ranks, ids), func(b *testing.B) { benchCheckHeld(b, ranks, ids, false) })
			b.Run(fmt.Sprintf("ranks=%d/ids=%d/bare", ranks, ids), func(b *testing.B) { benchBareGather(b, ranks, ids) })
		}
	}
	for _, ids := range []int{0, 64, 1024} {
		b.Run(fmt.Sprintf("ranks=4/ids=%d/check-checked", ids), func(b *testing.B) { benchCheckHeld(b, 4, ids, true) })
	}
	b.Run("guards", benchGuards)
	b.Run("guards-none", func(b *testing.B) {
		rec := flight.NewRecorder(0)
		var p flight.Path
		b.ReportAllocs()
		for i := range b.N {
			rec.End(rec.BeginAt("world", uint64(i), flight.KindAllgather, &p), nil)
		}
	})
}

// benchGuards is what guard values add to one checked iteration of a rank:
// the executor's six guards (admission's waiting, fits and
// free blocks, the leader's inbox, the progress policy's two local facts)
// recorded at their three decision points, as the executor records them
// (one lock each), then the collective that takes them: its flight record
// begun and ended, which copies them into the record. The bench row
// subtracts the record alone (guards-none): checked mode begins it with or
// without guards.
func benchGuards(b *testing.B) {
	rec := flight.NewRecorder(0)
	var p flight.Path
	b.ReportAllocs()
	for i := range b.N {
		v := int64(i)
		rec.Guards(flight.Value{Name: "waiting", V: v}, flight.Value{Name: "fits", V: v}, flight.Value{Name: "free_blocks", V: v})
		rec.Guard("inbox", v)
		rec.Guards(flight.Value{Name: "scope_holds", V: v & 1, Bool: true}, flight.Value{Name: "busy_locally", V: v & 2, Bool: true})
		rec.End(rec.BeginAt("world", uint64(i), flight.KindAllgather, &p), nil)
	}
}

// benchCheckHeld: CTX tp=ranks (one consensus hop, the TP group), each rank
// holding ids sessions cancelled on that rank only.
func benchCheckHeld(b *testing.B, ranks, ids int, checked bool) {
	b.ReportAllocs()
	var done atomic.Int64
	o := benchOpts{ctx: fmt.Sprintf("tp=%d", ranks), gen: "tp=1", model: tinyModel, ctxBlocks: ids + 8, genBlocks: 8, checked: checked,
		faults: func(role topology.Role, rank int) *transceiver.Faults {
			f := &transceiver.Faults{Cancel: map[request.ID]bool{1: true}}
			for i := range ids {
				f.Cancel[request.ID(heldBase+rank*ids+i)] = true
			}
			return f
		}}
	withRanks(b, o, func(ctx context.Context, r *benchRank) error {
		if r.role == topology.Generation {
			return idle(ctx, r, &done, int64(ranks))
		}
		defer done.Add(1)
		start := func(id request.ID) error {
			if _, err := r.pool.TryAllocate(id, 1); err != nil {
				return err
			}
			return r.tr.StartSend(transceiver.Request{ID: id, Tokens: 1})
		}
		// Request 1 is sent and cancelled on every rank: the first check
		// agrees on it and reaps it; it makes "ever sent" true everywhere.
		if err := start(1); err != nil {
			return err
		}
		for i := range ids {
			if err := start(request.ID(heldBase + r.groups.Rank*ids + i)); err != nil {
				return err
			}
		}
		res, err := r.tr.CheckContextTransferStatus(ctx, 0)
		if err != nil {
			return err
		}
		if len(res.Reaped) != 1 || r.tr.TerminalHeld() != ids {
			return fmt.Errorf("setup: reaped %d (want 1), %d terminal held (want %d)", len(res.Reaped), r.tr.TerminalHeld(), ids)
		}
		err = timed(ctx, b, r, r.groups.Scope[0], func() error {
			res, err := r.tr.CheckContextTransferStatus(ctx, 0)
			if err == nil && len(res.Reaped) != 0 {
				err = fmt.Errorf("reaped %d held sessions", len(res.Reaped))
			}
			return err
		})
		if err != nil {
			return err
		}
		if r.tr.TerminalHeld() != ids {
			return fmt.Errorf("%d terminal held after the loop, want %d", r.tr.TerminalHeld(), ids)
		}
		return nil
	})
}

// benchBareGather: AllgatherInt64s of ids values per rank on the same CTX TP
// group communicator (the reference of a consensus round).
func benchBareGather(b *testing.B, ranks, ids int) {
	b.ReportAllocs()
	var done atomic.Int64
	o := benchOpts{ctx: fmt.Sprintf("tp=%d", ranks), gen: "tp=1", noXcvr: true}
	withRanks(b, o, func(ctx context.Context, r *benchRank) error {
		if r.role == topology.Generation {
			// As in the check: the GEN rank idles until CTX is done, so
			// both sides of the ratio share the machine the same way.
			return idle(ctx, r, &done, int64(ranks))
		}
		defer done.Add(1)
		in := make([]int64, ids)
		for i := range in {
			in[i] = int64(heldBase + r.groups.Rank*ids + i)
		}
		var g comm.Gathered
		c := r.groups.Scope[0]
		return timed(ctx, b, r, c, func() error { return c.AllgatherInt64s(ctx, in, &g) })
	})
}

// BenchmarkCheckScaling: a status check with at_least 0 against sessions in
// flight (never terminal: GEN never asks for them) and against ranks.
func BenchmarkCheckScaling(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("ranks=2/inflight=%d", n), func(b *testing.B) { benchCheckInFlight(b, 2, n) })
	}
	for _, ranks := range []int{2, 4, 8, 16, 32, 64} {
		b.Run(fmt.Sprintf("ranks=%d/inflight=10", ranks), func(b *testing.B) { benchCheckInFlight(b, ranks, 10) })
	}
}

func benchCheckInFlight(b *testing.B, ranks, n int) {
	b.ReportAllocs()
	var done atomic.Int64
	var perSession atomic.Uint64
	o := benchOpts{ctx: fmt.Sprintf("tp=%d", ranks), gen: "tp=1", model: tinyModel, ctxBlocks: n + 8, genBlocks: 8}
	withRanks(b, o, func(ctx context.Context, r *benchRank) error {
		if r.role == topology.Generation {
			return idle(ctx, r, &done, int64(ranks))
		}
		defer done.Add(1)
		tp := r.groups.Scope[0]
		for i := range n {
			if _, err := r.pool.TryAllocate(request.ID(heldBase+i), 1); err != nil {
				return err
			}
		}
		var ms runtime.MemStats
		var before uint64
		if err := tp.Barrier(ctx); err != nil {
			return err
		}
		if r.groups.Rank == 0 {
			runtime.ReadMemStats(&ms)
			before = ms.TotalAlloc
		}
		if err := tp.Barrier(ctx); err != nil {
			return err
		}
		for i := range n {
			if err := r.tr.StartSend(transceiver.Request{ID: request.ID(heldBase + i), Tokens: 1}); err != nil {
				return err
			}
		}
		if err := tp.Barrier(ctx); err != nil {
			return err
		}
		if r.groups.Rank == 0 {
			runtime.ReadMemStats(&ms)
			perSession.Store((ms.TotalAlloc - before) / uint64(n*ranks))
		}
		err := timed(ctx, b, r, tp, func() error {
			_, err := r.tr.CheckContextTransferStatus(ctx, 0)
			return err
		})
		if err != nil {
			return err
		}
		if r.tr.Sessions() != n || r.tr.TerminalHeld() != 0 {
			return fmt.Errorf("%d sessions, %d terminal: want %d in flight", r.tr.Sessions(), r.tr.TerminalHeld(), n)
		}
		return nil
	})
	b.ReportMetric(float64(perSession.Load()), "B/session")
}

// xferModel: 8 layers, 8 KV heads of 128 x 2 bytes, 16 tokens per block.
// CTX tp=1 -> GEN tp=4: each GEN rank gets 2 heads of every layer, K and V:
// 8 KiB per token, so 128 tokens is a 1 MiB fragment, 8192 tokens 64 MiB.
var xferModel = topology.Model{Layers: 8, KVHeads: 8, HeadDim: 128, TokensPerBlock: 16, ElemBytes: 2}

var xferSizes = []struct {
	name   string
	tokens int
}{{"1MiB", 128}, {"64MiB", 8192}}

const xferGen = 4

func BenchmarkTransfer(b *testing.B) {
	for _, sz := range xferSizes {
		b.Run("frag="+sz.name+"/transfer", func(b *testing.B) { benchTransfer(b, sz.tokens, transceiver.VerifyFull) })
		b.Run("frag="+sz.name+"/transfer-checksum", func(b *testing.B) { benchTransfer(b, sz.tokens, transceiver.VerifyChecksum) })
		b.Run("frag="+sz.name+"/transfer-off", func(b *testing.B) { benchTransfer(b, sz.tokens, transceiver.VerifyOff) })
		b.Run("frag="+sz.name+"/p2p", func(b *testing.B) { benchBareP2P(b, sz.tokens) })
		b.Run("frag="+sz.name+"/memmove", func(b *testing.B) { benchMemmove(b, sz.tokens) })
	}
}

func fragBytes(tokens int) int {
	return xferModel.Layers * 2 * (xferModel.KVHeads / xferGen) * tokens * xferModel.HeadDim * xferModel.ElemBytes
}

// benchTransfer: per op, GEN posts the receive (untimed), CTX prefills
// (untimed), then, timed from CTX rank 0: StartSend and status checks until
// the request is reaped (every GEN rank acknowledged a verified fragment).
// Each op is paired with a copy() of the same bytes (the request's CTX
// blocks) into one buffer, timed on CTX rank 0 while the GEN ranks wait at
// the barrier: before the transfer on even ops (the blocks just filled) and
// after it on odd ones (just read by the GEN ranks). xfer/copy is the
// median over pairs of copy time / transfer time, which load on a shared
// machine moves alike. The copy runs on one goroutine; the transfer's
// copies run on the four GEN ranks' goroutines (on two cores here).
func benchTransfer(b *testing.B, tokens int, verify transceiver.Verify) {
	blocks := xferModel.Blocks(tokens)
	bytes := int64(fragBytes(tokens)) * xferGen
	b.SetBytes(bytes)
	b.ReportAllocs()
	n := b.N
	var xfer atomic.Int64
	var moved atomic.Int64
	o := benchOpts{ctx: "tp=1", gen: fmt.Sprintf("tp=%d", xferGen), model: xferModel, ctxBlocks: blocks, genBlocks: blocks, verify: verify}
	var ratios []float64
	var copies time.Duration
	withRanks(b, o, func(ctx context.Context, r *benchRank) error {
		var total time.Duration
		var ref []byte // CTX rank 0: the copy() reference's destination
		if r.role == topology.Context && r.groups.Rank == 0 {
			ref = make([]byte, r.pool.BlockBytes()*r.shard.BlocksFor(tokens))
		}
		copyRef := func(id request.ID) time.Duration {
			t0 := time.Now()
			at := 0
			for _, blk := range r.pool.Blocks(id) {
				at += copy(ref[at:], r.pool.Block(blk))
			}
			return time.Since(t0)
		}
		for i := range n + 1 { // the first is a warm-up
			q := transceiver.Request{ID: request.ID(i + 1), Tokens: tokens}
			if r.role == topology.Generation {
				if _, err := r.pool.TryAllocate(q.ID, r.shard.BlocksFor(tokens)); err != nil {
					return err
				}
				if err := r.tr.StartReceive(q); err != nil {
					return err
				}
			} else {
				ids, err := r.pool.TryAllocate(q.ID, r.shard.BlocksFor(tokens))
				if err != nil {
					return err
				}
				for j, id := range ids {
					transceiver.FillBlock(r.pool.Block(id), r.shard, uint64(q.ID), j)
				}
			}
			var dc time.Duration
			if r.role == topology.Context && r.groups.Rank == 0 && i%2 == 0 {
				dc = copyRef(q.ID)
			}
			if err := r.world.Barrier(ctx); err != nil {
				return err
			}
			t0 := time.Now()
			if r.role == topology.Context {
				if err := r.tr.StartSend(q); err != nil {
					return err
				}
			}
			for {
				var res transceiver.Result
				var err error
				if r.role == topology.Context {
					res, err = r.tr.CheckContextTransferStatus(ctx, 1)
				} else {
					res, err = r.tr.CheckGenTransferStatus(ctx, 1)
				}
				if err != nil {
					return err
				}
				if len(res.Reaped) == 1 {
					if x := res.Reaped[0]; x.Status != request.Completed {
						return fmt.Errorf("%s rank %d: request %d %s: %s", r.role, r.groups.Rank, x.ID, x.Status, x.Reason)
					}
					break
				}
			}
			if r.role == topology.Context && r.groups.Rank == 0 {
				dx := time.Since(t0)
				if i%2 == 1 {
					dc = copyRef(q.ID)
				}
				if i > 0 {
					total += dx
					copies += dc
					ratios = append(ratios, float64(dc)/float64(dx))
				}
			}
			if err := r.pool.Release(q.ID); err != nil { // the caller owns the blocks
				return err
			}
		}
		if r.role == topology.Context {
			xfer.Store(int64(total))
			moved.Store(r.tr.Stats().BytesSent)
		}
		return nil
	})
	if got, want := moved.Load(), bytes*int64(n+1); got != want {
		b.Fatalf("ctx sent %d bytes, want %d", got, want)
	}
	per := float64(xfer.Load()) / float64(n)
	b.ReportMetric(per, "xfer-ns/op")
	b.ReportMetric(float64(bytes)/per*1e3, "xfer-MB/s")
	b.ReportMetric(float64(copies.Nanoseconds())/float64(n), "copy-ns/op")
	slices.Sort(ratios)
	b.ReportMetric(median(ratios), "xfer/copy")
	b.ReportMetric(ratios[len(ratios)-1], "xfer/copy-best")
	b.ReportMetric(ratios[0], "xfer/copy-worst")
}

// median of sorted xs: the mean of the two middle values when there are
// an even number (pairs alternate their order, so an even count is the
// usual case, and the upper middle alone would lean to one order).
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// benchBareP2P: CTX rank 0 Isends one message of header + fragment bytes to
// each GEN rank, each GEN rank Irecvs it and answers 8 bytes; timed from
// the barrier to the last answer, like benchTransfer.
func benchBareP2P(b *testing.B, tokens int) {
	size := transceiver.HeaderSize + fragBytes(tokens)
	bytes := int64(fragBytes(tokens)) * xferGen
	b.SetBytes(bytes)
	b.ReportAllocs()
	n := b.N
	var xfer atomic.Int64
	o := benchOpts{ctx: "tp=1", gen: fmt.Sprintf("tp=%d", xferGen), noXcvr: true}
	withRanks(b, o, func(ctx context.Context, r *benchRank) error {
		const tag = 7
		var total time.Duration
		var sends [xferGen][]byte
		recv := make([]byte, size)
		ack := make([]byte, 8)
		if r.role == topology.Context {
			for g := range sends {
				sends[g] = make([]byte, size)
			}
		}
		for i := range n + 1 {
			if err := r.world.Barrier(ctx); err != nil {
				return err
			}
			t0 := time.Now()
			if r.role == topology.Context {
				var reqs []comm.Request
				for g := range xferGen {
					q, err := r.world.Isend(sends[g], 1+g, tag)
					if err != nil {
						return err
					}
					a, err := r.world.Irecv(make([]byte, 8), 1+g, tag+1)
					if err != nil {
						return err
					}
					reqs = append(reqs, q, a)
				}
				for _, q := range reqs {
					if _, err := q.Wait(ctx); err != nil {
						return err
					}
				}
				if i > 0 {
					total += time.Since(t0)
				}
				continue
			}
			q, err := r.world.Irecv(recv, 0, tag)
			if err != nil {
				return err
			}
			if _, err := q.Wait(ctx); err != nil {
				return err
			}
			a, err := r.world.Isend(ack, 0, tag+1)
			if err != nil {
				return err
			}
			if _, err := a.Wait(ctx); err != nil {
				return err
			}
		}
		if r.role == topology.Context {
			xfer.Store(int64(total))
		}
		return nil
	})
	per := float64(xfer.Load()) / float64(n)
	b.ReportMetric(per, "xfer-ns/op")
	b.ReportMetric(float64(bytes)/per*1e3, "xfer-MB/s")
}

// benchMemmove: copy the same bytes (one fragment per GEN rank) in one
// goroutine: the floor of an in-process transfer.
func benchMemmove(b *testing.B, tokens int) {
	size := fragBytes(tokens)
	b.SetBytes(int64(size) * xferGen)
	b.ReportAllocs()
	var src, dst [xferGen][]byte
	for g := range xferGen {
		src[g], dst[g] = make([]byte, size), make([]byte, size)
		copy(dst[g], src[g])
	}
	b.ResetTimer()
	for b.Loop() {
		for g := range xferGen {
			copy(dst[g], src[g])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "xfer-ns/op")
	b.ReportMetric(float64(size*xferGen)/(float64(b.Elapsed().Nanoseconds())/float64(b.N))*1e3, "xfer-MB/s")
}

// BenchmarkTransferParts breaks one request's transfer work down, in one
// goroutine, over all four GEN ranks' fragments: fill (the CTX prefill of
// the pattern, untimed in BenchmarkTransfer), pack (CTX: gather each
// fragment's head runs from the blocks, as the transceiver does), unpack
// (GEN: scatter them into its blocks) and verify (GEN: check every byte).
func BenchmarkTransferParts(b *testing.B) {
	ctxShard, err := topology.MustParseLayout("tp=1").Shard(xferModel, 0)
	if err != nil {
		b.Fatal(err)
	}
	genL := topology.MustParseLayout(fmt.Sprintf("tp=%d", xferGen))
	for _, sz := range xferSizes {
		nb := xferModel.Blocks(sz.tokens)
		ctxBlocks := make([][]byte, nb)
		for j := range ctxBlocks {
			ctxBlocks[j] = make([]byte, ctxShard.BlockBytes())
			transceiver.FillBlock(ctxBlocks[j], ctxShard, 1, j)
		}
		var genShards [xferGen]topology.Shard
		var genBlocks [xferGen][][]byte
		var payloads [xferGen][]byte
		for g := range xferGen {
			if genShards[g], err = genL.Shard(xferModel, g); err != nil {
				b.Fatal(err)
			}
			for range nb {
				genBlocks[g] = append(genBlocks[g], make([]byte, genShards[g].BlockBytes()))
			}
			payloads[g] = make([]byte, 0, fragBytes(sz.tokens))
		}
		pack := func() {
			for g := range xferGen {
				s := genShards[g]
				run := ctxShard.RunBytes(s.HeadLo, s.HeadHi)
				p := payloads[g][:0]
				for _, blk := range ctxBlocks {
					for layer := 0; layer < xferModel.Layers; layer++ {
						for kv := topology.K; kv <= topology.V; kv++ {
							off := ctxShard.Offset(layer, kv, s.HeadLo, 0)
							p = append(p, blk[off:off+run]...)
						}
					}
				}
				payloads[g] = p
			}
		}
		unpack := func() {
			for g := range xferGen {
				s := genShards[g]
				run := s.RunBytes(s.HeadLo, s.HeadHi)
				pos := 0
				for _, blk := range genBlocks[g] {
					for layer := 0; layer < xferModel.Layers; layer++ {
						for kv := topology.K; kv <= topology.V; kv++ {
							off := s.Offset(layer, kv, s.HeadLo, 0)
							copy(blk[off:off+run], payloads[g][pos:pos+run])
							pos += run
						}
					}
				}
			}
		}
		verify := func() {
			for g := range xferGen {
				s := genShards[g]
				for j, blk := range genBlocks[g] {
					if _, _, _, _, ok := transceiver.VerifyBlock(blk, s, 1, j, 0, xferModel.Layers, s.HeadLo, s.HeadHi); !ok {
						b.Fatalf("gen rank %d block %d does not verify", g, j)
					}
				}
			}
		}
		// copycheck: what the lent path does per byte, from the CTX blocks
		// straight into the GEN blocks.
		copycheck := func() {
			hb, tpb := xferModel.HeadBytes(), xferModel.TokensPerBlock
			for g := range xferGen {
				s := genShards[g]
				run := s.RunBytes(s.HeadLo, s.HeadHi)
				for j, blk := range genBlocks[g] {
					for layer := 0; layer < xferModel.Layers; layer++ {
						for kv := topology.K; kv <= topology.V; kv++ {
							src := ctxBlocks[j][ctxShard.Offset(layer, kv, s.HeadLo, 0):][:run]
							off := s.Offset(layer, kv, s.HeadLo, 0)
							if _, _, ok := transceiver.CopyCheckRun(blk[off:off+run], src, hb, 1, layer, kv, s.HeadLo, s.HeadHi, tpb, j*tpb, false); !ok {
								b.Fatalf("gen rank %d block %d does not check", g, j)
							}
						}
					}
				}
			}
		}
		fill := func() {
			for j, blk := range ctxBlocks {
				transceiver.FillBlock(blk, ctxShard, 1, j)
			}
		}
		copycheck()
		pack()
		unpack()
		verify()
		bytes := int64(fragBytes(sz.tokens)) * xferGen
		for _, part := range []struct {
			name string
			fn   func()
		}{{"fill", fill}, {"copycheck", copycheck}, {"pack", pack}, {"unpack", unpack}, {"verify", verify}} {
			b.Run("frag="+sz.name+"/"+part.name, func(b *testing.B) {
				b.SetBytes(bytes)
				b.ReportAllocs()
				for b.Loop() {
					part.fn()
				}
			})
		}
	}
}
