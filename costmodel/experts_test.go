package costmodel

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/topology"
)

// DeepSeek-R1's shape against its published totals, and MLA's cache: 576
// elements a token and layer, the same on every TP rank.
func TestDeepSeekR1Shape(t *testing.T) {
	m := Models["deepseek-r1"]
	require.NoError(t, m.Validate())
	// q_a 7168x1536, q_b 1536x128*192, kv_a 7168x576, kv_b 512x128*256, o 128*128x7168.
	assert.Equal(t, float64(7168*1536+1536*128*192+7168*576+512*128*256+128*128*7168), m.AttnParams())
	assert.InEpsilon(t, 671e9, m.Params(), 0.01)
	assert.InEpsilon(t, 37e9, m.ActiveParams(), 0.03)
	assert.Equal(t, float64(61*576*2), m.KVBytesPerToken())
	g := m.Geometry(32)
	assert.Equal(t, topology.Model{Layers: 61, KVHeads: 1, HeadDim: 288, TokensPerBlock: 32, ElemBytes: 2}, g)
	sh, err := topology.MustParseLayout("tp=8").Shard(g, 5)
	require.NoError(t, err)
	assert.Equal(t, 61*576*2*32, sh.BlockBytes(), "every TP rank holds the whole latent")

	hw := Hardwares["h200-nvlink-ib400"]
	p := Placement{Model: m, HW: hw}
	kv := func(spec string) float64 {
		return p.side(topology.MustParseLayout(spec), 0).decodeAttn(0, []Seq{{Tokens: 4096}}).kv
	}
	assert.Equal(t, kv("tp=1"), kv("tp=8"), "MLA's KV read does not shrink with TP")
	assert.Equal(t, 61*4096*576*2.0, kv("tp=8"))
	llama := Placement{Model: Models["llama-3-70b"], HW: hw}
	gqa := func(spec string) float64 {
		return llama.side(topology.MustParseLayout(spec), 0).decodeAttn(0, []Seq{{Tokens: 4096}}).kv
	}
	assert.Equal(t, gqa("tp=1"), 8*gqa("tp=8"), "grouped-query KV splits over TP")
	// FP4 experts: 4.5 bits a routed or shared expert parameter.
	f := Models["deepseek-r1-fp4"]
	experts := float64(f.moeLayers()) * float64(f.Experts+f.SharedExperts) * f.expertParams()
	assert.InDelta(t, (f.Params()-experts)*1+experts*4.5/8, f.WeightBytesTotal(), 1)
}

func TestMaxOverMean(t *testing.T) {
	assert.Equal(t, 1.0, maxOverMean(100, 0.1, 1))
	assert.Equal(t, 1.0, maxOverMean(0, 0.5, 8))
	// Two Bernoulli(1/2): E[max] = 3/4 over a mean of 1/2.
	assert.InDelta(t, 1.5, maxOverMean(1, 0.5, 2), 1e-12)
	// Two Binomial(2, 1/2): P(max>0) = 15/16, P(max>1) = 7/16.
	assert.InDelta(t, (15.0/16+7.0/16)/1, maxOverMean(2, 0.5, 2), 1e-12)
	assert.InDelta(t, 1/math.Sqrt(math.Pi), normalMax(2), 1e-4)
	assert.InDelta(t, 1.0294, normalMax(4), 1e-3)
	assert.InDelta(t, 0, normalMax(1), 1e-9)
	// Continuous across the switch to the normal approximation.
	assert.InDelta(t, maxOverMean(7990, 0.125, 8), maxOverMean(8010, 0.125, 8), 2e-3)
	// Large batches balance.
	assert.Less(t, maxOverMean(1e6, 0.125, 8), 1.01)
	assert.Greater(t, maxOverMean(8, 0.125, 8), 2.0)
}

// EP without attention-DP keeps TP's collectives and weights; it pays the
// busiest part's experts, which only matters for small batches.
func TestExpertParallelUnderTP(t *testing.T) {
	m := Models["deepseek-r1"]
	hw := Hardwares["h200-nvlink-ib400"]
	tp, ep := topology.MustParseLayout("tp=8"), topology.MustParseLayout("tp=8,ep=8")
	p := Placement{Model: m, HW: hw, Ctx: tp, Gen: ep}
	require.NoError(t, p.Validate())
	assert.Equal(t, p.side(tp, 0).weightsPerRank(), p.side(ep, 0).weightsPerRank())
	decode := func(l topology.Layout, n int) time.Duration {
		q := Placement{Model: m, HW: hw, Ctx: l, Gen: l}
		return q.Decode(make([]Seq, n))
	}
	for _, n := range []int{1, 8, 64} {
		assert.Greater(t, decode(ep, n), decode(tp, n), "batch %d: EP's busiest part reads more experts", n)
	}
	// The busiest part's routed FLOPs: the expected maximum of 8 parts'
	// Binomial(64 tokens x 8 experts, 1/8), exactly; the router and the
	// shared expert split evenly.
	es, ts := p.side(ep, 0), p.side(tp, 0)
	rest, shared, routed := ts.ffnFLOPsPerToken(true)
	imb := maxOverMean(64*8, 1.0/8, 8)
	assert.Greater(t, imb, 1.1)
	assert.InEpsilon(t, (rest+shared+routed*imb)*64/8, es.ffnWork(0, 1, 64, 8).allFLOPs(), 1e-12)
	assert.InEpsilon(t, (rest+shared+routed)*64/8, ts.ffnWork(0, 1, 64, 8).allFLOPs(), 1e-12)
	assert.InEpsilon(t, (shared+routed)*64/8, ts.ffnWork(0, 1, 64, 8).xflops, 1e-12, "the experts' FLOPs apart")
	// At a large batch the parts balance: within 3%.
	big := make([]Seq, 4096)
	for i := range big {
		big[i] = Seq{Tokens: 1}
	}
	q, r := Placement{Model: m, HW: hw, Gen: tp}, Placement{Model: m, HW: hw, Gen: ep}
	assert.InEpsilon(t, float64(q.Decode(big)), float64(r.Decode(big)), 0.03)
}

// Under attention-DP an MoE layer with EP is two all-to-alls of each
// rank's tokens to the parts holding their experts, a dense layer (and an
// MoE layer without EP) an allreduce of every index's tokens: exactly.
func TestExpertParallelCollectives(t *testing.T) {
	m := Models["deepseek-r1-fp4"]
	hw := Hardwares["gb200-nvl72"]
	row := float64(m.Hidden * m.ActBytes)
	// A token's 8 experts come from 4 of the 8 groups of 32 (DeepSeek-V3's
	// group-limited routing, topology.Routing.Parts): 3.12 EP parts of 4
	// (an independent simulation of the router in review gave 3.12).
	copiesOf := func(ep int) float64 { return m.Routing().Parts(ep) }
	assert.InDelta(t, 3.12, copiesOf(4), 0.02)
	for _, tc := range []struct {
		spec     string
		rows     []float64
		expertTP float64
	}{
		{"dp=4,ep=4,adp", []float64{3, 5, 1, 2}, 1},
		{"dp=4,ep=2,adp", []float64{3, 5, 1, 2}, 2},
		{"tp=2,dp=2,ep=4,adp", []float64{6, 2}, 1},
	} {
		l := topology.MustParseLayout(tc.spec)
		s := Placement{Model: m, HW: hw}.side(l, 0)
		members := []int{0, 1, 2, 3}
		var all float64
		for _, r := range tc.rows {
			all += r
		}
		ar := hw.Fabric.Collective(flight.KindAllreduce, members, int(math.Ceil(all*row)))
		busiest := 5.0
		if l.TP == 2 {
			busiest = 6.0 / 2
		}
		c := copiesOf(l.EP)
		assert.InDelta(t, c, s.dispatchCopies(), 1e-9, tc.spec)
		a2a := hw.Fabric.Collective(flight.KindAlltoall, members, int(math.Ceil(busiest*c*tc.expertTP*row)))
		want := 3*ar + 58*2*a2a
		assert.Equal(t, want, s.ffnCollectives(0, tc.rows), tc.spec)
		noEP := l
		noEP.EP = 0
		assert.Equal(t, 61*ar, Placement{Model: m, HW: hw}.side(noEP, 0).ffnCollectives(0, tc.rows), tc.spec+" without ep")
	}
}

// The seed's layouts: attention-DP with EP over one GB200 NVLink domain
// beats attention-DP with expert TP for a large decode batch (each rank
// sends its own tokens, not every index's), by more the wider the group,
// and EP costs nothing in weights.
func TestSeedLayoutsOnGB200(t *testing.T) {
	m := Models["deepseek-r1-fp4"]
	hw := Hardwares["gb200-nvl72"]
	ctx, gen := topology.MustParseLayout("dp=4,ep=4,adp"), topology.MustParseLayout("tp=8,ep=8")
	p := Placement{Model: m, HW: hw, Ctx: ctx, Gen: gen}
	require.NoError(t, p.Validate())
	var gain []float64
	for _, dp := range []int{4, 8, 16, 32} {
		ep := topology.Layout{TP: 1, PP: 1, CP: 1, DP: dp, AttentionDP: true, EP: dp}
		etp := ep
		etp.EP = 0
		withEP, noEP := Placement{Model: m, HW: hw, Gen: ep}, Placement{Model: m, HW: hw, Gen: etp}
		b := make([]Seq, 64*dp)
		for i := range b {
			b[i] = Seq{Tokens: 2048, DP: i % dp}
		}
		e, x := withEP.Decode(b), noEP.Decode(b)
		t.Logf("dp=%d: ep %v, expert tp %v", dp, e, x)
		assert.Less(t, e, x, "dp=%d", dp)
		gain = append(gain, float64(x)/float64(e))
		assert.Equal(t, withEP.side(ep, 0).weightsPerRank(), noEP.side(etp, 0).weightsPerRank())
	}
	assert.IsIncreasing(t, gain)
	assert.Positive(t, p.KVBlocks(gen, m.Geometry(32)))
}

func TestExpertParallelErrors(t *testing.T) {
	hw := Hardwares["h200-nvlink-ib400"]
	for _, tc := range []struct {
		model, spec, msg string
	}{
		{"llama-3-70b", "tp=8,ep=8", `ep = 8: model "llama-3-70b" has no routed experts (ep needs an MoE model)`},
		{"gpt-oss-120b", "dp=6,ep=6,adp", `ep = 6 must divide model "gpt-oss-120b"'s 128 routed experts`},
	} {
		l := topology.MustParseLayout(tc.spec)
		p := Placement{Model: Models[tc.model], HW: hw, Ctx: topology.MustParseLayout("tp=8"), Gen: l}
		if tc.model == "gpt-oss-120b" {
			p.Ctx = topology.MustParseLayout("tp=1")
		}
		err := p.Validate()
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), "gen layout "+tc.spec)
		assert.Contains(t, err.Error(), tc.msg)
		_, err = p.Offline(l, Scheduler{}, 128, 128)
		assert.ErrorContains(t, err, tc.msg)
	}
}

// The offline steady state pays the step's imbalance, not one request's:
// at a large in-flight batch EP under TP is within 3% of expert TP.
func TestOfflineExpertParallel(t *testing.T) {
	p := Placement{Model: Models["deepseek-r1"], HW: Hardwares["h200-nvlink-ib400"]}
	sch := Scheduler{MaxBatch: 4096}
	tp, err := p.Offline(topology.MustParseLayout("tp=8"), sch, 64, 64)
	require.NoError(t, err)
	ep, err := p.Offline(topology.MustParseLayout("tp=8,ep=8"), sch, 64, 64)
	require.NoError(t, err)
	assert.InEpsilon(t, tp.Throughput, ep.Throughput, 0.03)
	assert.LessOrEqual(t, ep.Throughput, tp.Throughput)
}
