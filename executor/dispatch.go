package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
)

// Expert-parallel dispatch under attention-DP. Each rank of an EP group
// holds its own DP index's tokens and one EP part of the routed experts,
// so an MoE layer sends each token to the parts that hold its experts.
// Before the bytes, engines exchange how many tokens each rank sends each
// part (DeepEP's notify step): an all-to-all of counts. The runtime runs
// that all-to-all for real once a step, over the EP group, and checks what
// it received against what the agreed batch routes: the bytes' time is
// in the modelled step, the agreement on counts is a collective every
// member enters. A count that differs is ErrDispatch, naming the sender.

// ErrDispatch: an EP peer's dispatch counts differ from what the agreed
// batch routes (the ranks of one EP group do not agree on the step).
var ErrDispatch = errors.New("executor: ep dispatch counts disagree")

// Routing is what the runtime needs of an MoE model to route tokens
// (topology.Routing: its experts, picks per token and groups; a dense
// model's is zero).
type Routing = topology.Routing

// needsDispatch reports whether layout l exchanges tokens between ranks
// in its MoE layers: expert parallelism under attention-DP (under TP
// every rank already holds every token, and the FFN's collectives are
// TP's allreduces).
func needsDispatch(l topology.Layout) bool { return l.AttentionDP && l.Experts() > 1 }

// DispatchToken is one token of a step: its request, its position in the
// request and the DP index that holds it.
type DispatchToken struct {
	ID  request.ID
	Pos int
	DP  int
}

// RouteCounts adds to counts[p] (one entry per EP part) one copy of each
// token for every part that holds at least one of its experts. The
// routing is a pure function of the token (Routing.Pick, as the cost
// model assumes), so every rank computes the same counts from the agreed
// batch. Parts hold contiguous ranges of Experts/len(counts); r must be
// valid for that many parts.
//
// The runtime's dispatch routes by the routing's table instead
// (SampledRouteCounts): the same law, a lookup a token.
func RouteCounts(r Routing, toks []DispatchToken, counts []int64) error {
	var b routeBufs
	return b.route(r, toks, counts)
}

// SampledRouteCounts is RouteCounts with each token of a grouped routing
// routed as one of the routing's representative tokens (Routing.Table): a
// pure function of the token as well, whose per-expert loads follow
// Pick's law (topology's TestRouteTableFollowsPicksLaw), at a lookup a
// token instead of every expert scored. The counts are the
// dispatch check's, which nothing prices: the cost model prices a step's
// dispatch by the routing's expected parts a token (Routing.Parts).
func SampledRouteCounts(r Routing, toks []DispatchToken, counts []int64) error {
	var b routeBufs
	return b.sampled(r, toks, counts)
}

// sampled is SampledRouteCounts with b's buffers.
func (b *routeBufs) sampled(r Routing, toks []DispatchToken, counts []int64) error {
	spans := make([]dispatchSpan, len(toks))
	for i, t := range toks {
		spans[i] = dispatchSpan{ID: t.ID, Pos: t.Pos, N: 1, DP: t.DP}
	}
	return b.sampledSpans(r, spans, cpFilter{}, counts)
}

// dispatchSpan is a run of a step's tokens: positions [Pos, Pos+N) of
// request ID, held by DP index DP. A prefill chunk is one; a decode step
// has one of one token a request.
type dispatchSpan struct {
	ID         request.ID
	Pos, N, DP int
}

// cpFilter picks the tokens a CP rank holds: those of every CP-th KV block
// (of tpb tokens) from block rem; all of them when CP is 0 or 1.
type cpFilter struct{ tpb, cp, rem int }

func (f cpFilter) holds(pos int) bool { return f.cp <= 1 || (pos/f.tpb)%f.cp == f.rem }

// sampledSpans adds to counts the dispatch counts of the tokens of spans
// that f picks, as SampledRouteCounts does for them one by one. A routing
// that is not grouped routes exactly: Pick draws its experts as cheaply
// as a table (and so does one of more experts than a table holds).
func (b *routeBufs) sampledSpans(r Routing, spans []dispatchSpan, f cpFilter, counts []int64) error {
	parts := len(counts)
	if err := r.Validate(parts); err != nil {
		return fmt.Errorf("executor: route over %d parts: %w", parts, err)
	}
	per := r.Experts / parts
	if cap(b.touched) < parts {
		b.touched = make([]uint32, parts)
	}
	touched := b.touched[:parts]
	clear(touched)
	var table *topology.RouteTable
	if r.Grouped() && r.Experts <= topology.MaxTableExperts {
		table = r.Table()
	} else if cap(b.picked) < r.TopK {
		b.picked = make([]int, r.TopK)
	}
	k := uint32(0) // tokens counted so far: touched[p] == k marks this token's parts
	for _, sp := range spans {
		for pos := sp.Pos; pos < sp.Pos+sp.N; pos++ {
			if !f.holds(pos) {
				continue
			}
			k++
			key := uint64(sp.ID)<<32 ^ uint64(pos)
			if table == nil {
				picked := b.picked[:r.TopK]
				r.Pick(key, picked, nil)
				for _, e := range picked {
					if p := e / per; touched[p] != k {
						touched[p] = k
						counts[p]++
					}
				}
				continue
			}
			for _, e := range table.Experts(key) {
				if p := int(e) / per; touched[p] != k {
					touched[p] = k
					counts[p]++
				}
			}
		}
	}
	return nil
}

// routeBufs are RouteCounts' scratch buffers, kept by a dispatcher.
type routeBufs struct {
	picked  []int          // one token's experts
	scratch []uint64       // Routing.Pick's scores
	touched []uint32       // touched[p] == k+1: token k counted part p
	sel     []dispatchSpan // one DP index's spans
}

func (b *routeBufs) route(r Routing, toks []DispatchToken, counts []int64) error {
	parts := len(counts)
	if err := r.Validate(parts); err != nil {
		return fmt.Errorf("executor: route over %d parts: %w", parts, err)
	}
	per := r.Experts / parts
	const batch = 4 // Routing.PickEach runs four tokens' hash chains side by side
	if cap(b.picked) < batch*r.TopK {
		b.picked = make([]int, batch*r.TopK)
	}
	if cap(b.scratch) < r.PickEachScratchLen() {
		b.scratch = make([]uint64, r.PickEachScratchLen())
	}
	scratch := b.scratch[:r.PickEachScratchLen()]
	if cap(b.touched) < parts {
		b.touched = make([]uint32, parts)
	}
	touched := b.touched[:parts]
	clear(touched)
	var keys [batch]uint64
	for k0 := 0; k0 < len(toks); k0 += batch {
		m := min(batch, len(toks)-k0)
		for j, t := range toks[k0 : k0+m] {
			keys[j] = uint64(t.ID)<<32 ^ uint64(t.Pos)
		}
		picked := b.picked[:m*r.TopK]
		r.PickEach(keys[:m], picked, scratch)
		for j := range m {
			k := k0 + j
			for _, e := range picked[j*r.TopK : (j+1)*r.TopK] {
				if p := e / per; touched[p] != uint32(k+1) {
					touched[p] = uint32(k + 1)
					counts[p]++
				}
			}
		}
	}
	return nil
}

// dispatcher is one rank's EP group and buffers.
type dispatcher struct {
	c                comm.Comm // the EP group, member i holding part i
	routing          Routing
	layout           topology.Layout
	tpb              int        // tokens per KV block: CP splits a request's blocks round robin
	members          []int      // instance ranks of the group, by part
	dps              []int      // their DP indices
	cp               int        // this rank's CP index (the group's)
	misroute         request.ID // fault: counts are off by one on the first step with this request
	send, recv, want []int64
	rows             stepRows // the step's counts when no other member shares them
	steps            int
	bufs             routeBufs
	memo             *routeMemo // shared with the group's other members in this process (nil: none)
}

// newDispatcher builds rank's EP group over inst when l needs one: a
// split of the instance, collective over it, entered (or not) alike by
// every rank, since it depends on the layout alone.
func newDispatcher(ctx context.Context, inst comm.Comm, l topology.Layout, rank int, r Routing, tokensPerBlock int, memo *routeMemo) (*dispatcher, error) {
	if !needsDispatch(l) {
		return nil, nil
	}
	members := l.EPGroup(rank)
	c, err := inst.Split(ctx, members[0], rank)
	if err != nil {
		return nil, fmt.Errorf("executor: split the EP group of rank %d: %w", rank, err)
	}
	if c.Size() != len(members) {
		c.Close()
		return nil, fmt.Errorf("executor: the EP group of rank %d has %d ranks, want %d", rank, c.Size(), len(members))
	}
	d := &dispatcher{c: c, routing: r, layout: l, tpb: max(1, tokensPerBlock), members: members, cp: l.Coord(rank).CP, memo: memo}
	for _, m := range members {
		d.dps = append(d.dps, l.Coord(m).DP)
	}
	n := len(members)
	d.send, d.recv, d.want = make([]int64, n), make([]int64, n), make([]int64, n)
	return d, nil
}

func (d *dispatcher) close() {
	if d != nil {
		d.c.Close()
	}
}

// exchange is one step's dispatch counts: spans are the step's tokens of
// every DP index (agreed), who names this rank in errors and peer names an
// instance rank. Every member enters it in the same iteration.
func (d *dispatcher) exchange(ctx context.Context, spans []dispatchSpan, who string, peer func(int) string) error {
	d.steps++
	// A CP rank holds the tokens of every CP-th block.
	f := cpFilter{tpb: d.tpb, cp: d.layout.CP, rem: d.cp}
	rows, err := d.memo.step(d.routing, spans, f, d.dps, &d.rows, &d.bufs)
	if err != nil {
		return err
	}
	me := d.c.Rank()
	copy(d.send, rows[me])
	if d.misroute != 0 && containsID(spans, d.misroute) {
		d.misroute = 0 // once
		for j := range d.send {
			if j != me {
				d.send[j]++
			}
		}
	}
	for i := range d.want {
		d.want[i] = rows[i][me]
	}
	if err := comm.Alltoall(ctx, d.c, d.send, d.recv); err != nil {
		return fmt.Errorf("executor: %s: ep dispatch counts: %w", who, err)
	}
	for i := range d.recv {
		if d.recv[i] != d.want[i] {
			return fmt.Errorf("%w: %s, EP part %d, got %d token copies from %s (EP part %d) in step %d, but the agreed batch routes %d there: their batches differ",
				ErrDispatch, who, me, d.recv[i], peer(d.members[i]), i, d.steps, d.want[i])
		}
	}
	return nil
}

func containsID(spans []dispatchSpan, id request.ID) bool {
	for _, t := range spans {
		if t.ID == id {
			return true
		}
	}
	return false
}
