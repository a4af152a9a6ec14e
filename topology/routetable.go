package topology

import "sync"

// RouteTable is a cheaper routing with the same distribution as Pick's:
// a token routes as one of TableSize representative tokens (keys 0 to
// TableSize-1), each routed once by Pick. Which one is a hash of the
// token's own key, so the routing is still a pure function of the token
// (every rank that knows the token routes it alike), and a token's
// experts, and how they fall on EP parts, are drawn from TableSize exact
// routings: a step's per-expert loads follow the exact routing's law, up
// to the table's sampling error. A token costs a hash and a lookup, not
// Pick's scoring of every expert (about a microsecond for DeepSeek-R1's
// 256 experts in 8 groups, the most of a simulated MoE run's time).
type RouteTable struct {
	topK    int
	experts []uint16 // TableSize*TopK: representative i's experts at [i*TopK, (i+1)*TopK)
}

// TableSize is how many representative tokens a RouteTable routes by
// (2^15: each of their routings is one of 32768 draws, so a probability
// read off the table is within about 0.5% of Pick's).
const TableSize = 1 << 15

const tableBits = 15

// tables holds each routing's table, built once (Pick over TableSize
// keys: tens of milliseconds for DeepSeek-R1's routing).
var tables sync.Map // Routing -> *RouteTable

// MaxTableExperts is the most experts a RouteTable holds (they are kept
// as 16-bit numbers).
const MaxTableExperts = 1 << 16

// Table returns r's route table. r must be valid (Validate with 1 part)
// and have at most MaxTableExperts experts (it panics otherwise). A routing that is not Grouped needs none:
// Pick draws its experts directly, as cheaply as a table would.
func (r Routing) Table() *RouteTable {
	if t, ok := tables.Load(r); ok {
		return t.(*RouteTable)
	}
	if r.Experts > MaxTableExperts {
		panic("topology: a route table of more than 65536 experts")
	}
	t := &RouteTable{topK: r.TopK, experts: make([]uint16, TableSize*r.TopK)}
	r.fillTable(t.experts, 0, TableSize)
	got, _ := tables.LoadOrStore(r, t)
	return got.(*RouteTable)
}

// fillTable routes keys [lo, hi) into experts (TopK a key).
func (r Routing) fillTable(experts []uint16, lo, hi int) {
	const chunk = 256
	keys := make([]uint64, chunk)
	picked, scratch := make([]int, chunk*r.TopK), make([]uint64, r.PickEachScratchLen())
	for k0 := lo; k0 < hi; k0 += chunk {
		m := min(chunk, hi-k0)
		for j := range m {
			keys[j] = uint64(k0 + j)
		}
		r.PickEach(keys[:m], picked[:m*r.TopK], scratch)
		for j, e := range picked[:m*r.TopK] {
			experts[k0*r.TopK+j] = uint16(e)
		}
	}
}

// Experts returns the experts of the token with routing key key (the
// representative's, TopK of them; read only).
func (t *RouteTable) Experts(key uint64) []uint16 {
	i := int(splitmix(key) >> (64 - tableBits))
	return t.experts[i*t.topK : (i+1)*t.topK]
}
