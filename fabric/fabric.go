// Package fabric is the link model both the simulator and the cost model
// price with: a message's time over a link (latency plus bytes over
// bandwidth), and a collective's over the ranks of a fabric (nodes,
// rails, NVLink SHARP, NCCL's choice of ring or tree), with presets for the
// machines rankrun knows and their sources. It knows nothing of ranks'
// programs, schedules or time passing: comm/sim charges its costs in
// virtual time, costmodel adds them to a step's price.
package fabric

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm/flight"
)

// Link is the cost of moving bytes over one class of link: a message of n
// bytes takes Latency + n/Bandwidth.
type Link struct {
	Latency   time.Duration
	Bandwidth float64 // bytes per second; 0: infinite
}

// Time is how long n bytes take over l.
func (l Link) Time(n int) time.Duration {
	t := l.Latency
	if l.Bandwidth > 0 && n > 0 {
		// Saturated at the longest Duration: a float past int64 converts
		// to an undefined value, and a time past it wraps when added.
		d := float64(n) / l.Bandwidth * float64(time.Second)
		if d >= float64(math.MaxInt64-t) {
			return math.MaxInt64
		}
		t += time.Duration(d)
	}
	return t
}

// Fabric is the link model of a cluster: ranks on one node (RanksPerNode of
// them, world ranks in order) talk over Intra, ranks on different nodes over
// Inter, each GPU through its own NIC (a rail). Point-to-point messages
// (KV transfers) move at a link's bandwidth; collectives at what the
// algorithm NCCL's tuner would pick reaches (Collective). The zero Fabric
// costs nothing.
type Fabric struct {
	Name         string
	Intra, Inter Link
	RanksPerNode int // 0: every rank on one node
	// Rails is how many NICs a node has (one per GPU on DGX and HGX
	// nodes; 0: one). A collective across nodes runs one channel per
	// rail its members on a node can use, at most Channels, so its ring
	// crosses between nodes at that many times Inter.Bandwidth.
	Rails int
	// Ring is the bus bandwidth a ring collective reaches within a node
	// (bytes/s; 0: Intra.Bandwidth): below the links' peak.
	Ring float64
	// NVLS is the bus bandwidth of an NVLink SHARP allreduce within a
	// node (bytes/s; 0: the switch has none).
	NVLS float64
	// Channels is how many of a node's NICs a collective between nodes
	// drives at once (NCCL channels, one NIC each; 0: every rail its
	// members can use).
	Channels int
	// NVLSTree is whether an allreduce across nodes may run as an NVLS
	// tree (nvlsTree): NVLink SHARP within each node, a tree between. It
	// needs NVLS.
	NVLSTree bool
	Source   string
}

// Fabrics are the named presets. Figures are per GPU and per direction;
// each says where it comes from.
var Fabrics = map[string]Fabric{
	"zero": {Name: "zero", Source: "no cost: control-plane only, every figure is the runtime's own"},
	"h100-nvlink-ib400": {Name: "h100-nvlink-ib400", RanksPerNode: 8, Rails: 8,
		// NVLink 4: 900 GB/s bidirectional per GPU (NVIDIA H100 Tensor Core GPU datasheet), 450 GB/s a direction;
		// a few microseconds per NVLink/NVSwitch hop as NCCL reports for small messages.
		Intra: Link{Latency: 3 * time.Microsecond, Bandwidth: 450e9},
		// NDR InfiniBand 400 Gb/s per GPU (ConnectX-7, one NIC per GPU in a DGX H100): 50 GB/s a direction,
		// 48 GB/s reached (NVIDIA/nccl-tests#290: "for NDR @ 400Gbps you should see 46-48GB/s per NIC").
		Inter: Link{Latency: 5 * time.Microsecond, Bandwidth: 48e9},
		// nccl-tests all_reduce_perf on 8 H100 SXM in one node: ~370 GB/s bus bandwidth with NCCL_ALGO=Ring
		// (NVIDIA/nccl-tests#212, #290), 476 GB/s with NVLink SHARP (#290: "in the expected range for H100").
		Ring: 370e9, NVLS: 476e9,
		// No NVLS tree across nodes. NVIDIA/nccl#1221 (8 H100 a node, 8x 400G RoCE, NCCL 2.19.3) measured
		// NVLS lifting 2 nodes from 330 to 430 GB/s but nothing on 4 (320 either way); nvlsTree at these
		// rails would give 509 and 495, above both, and no H100 row is published to fit it on.
		Source: "NVIDIA H100 datasheet (NVLink 900 GB/s); DGX H100 user guide (8x ConnectX-7 NDR 400 Gb/s); nccl-tests#212, #290 (ring 370 GB/s, NVLS 476 GB/s, 46-48 GB/s per NIC)"},
	"h200-nvlink-ib400": {Name: "h200-nvlink-ib400", RanksPerNode: 8, Rails: 8,
		// H200 keeps H100's NVLink 4 and NVSwitch: 900 GB/s bidirectional (NVIDIA H200 Tensor Core GPU datasheet);
		// the H100 figures for what a ring and NVLink SHARP reach.
		Intra: Link{Latency: 3 * time.Microsecond, Bandwidth: 450e9},
		Inter: Link{Latency: 5 * time.Microsecond, Bandwidth: 48e9},
		Ring:  370e9, NVLS: 476e9,
		// No NVLS tree across nodes, as on H100.
		Source: "NVIDIA H200 datasheet (NVLink 900 GB/s); HGX H200 reference (ConnectX-7 NDR 400 Gb/s per GPU); the H100 node's nccl-tests figures (#212, #290)"},
	"gb200-nvl72": {Name: "gb200-nvl72", RanksPerNode: 72, Rails: 72,
		// NVLink 5: 1.8 TB/s bidirectional per GPU, 72 GPUs in one NVLink domain (NVIDIA GB200 NVL72 datasheet).
		Intra: Link{Latency: 3 * time.Microsecond, Bandwidth: 900e9},
		// all_reduce_perf over one whole NVL72 rack (72 GPUs, NCCL 2.26.2): 834.6 GB/s bus bandwidth at 8 GB
		// (coreweave/nccl-tests README, "Expected Performance", GB200 single rack), above what a ring reaches:
		// taken as NVLink SHARP's (fitted on that row). No ring figure is published: it is taken at the
		// H100 node's measured ring over its link peak (370 / 450 GB/s) of NVLink 5's 900 GB/s, an assumption.
		Ring: 740e9, NVLS: 835e9,
		// Across racks an allreduce runs as an NVLS tree (nvlsTree), whose phase between racks reached,
		// on twenty racks (1,440 GPUs, 16 GB: 405.7 GB/s bus bandwidth, coreweave/nccl-tests README, GB200 20 racks),
		// about 8 NICs' worth of a rack's 72 (384 GB/s a rack): Channels fitted on that row alone. The
		// mechanism (a bounded number of NCCL channels, one NIC each) is this model's assumption, and it
		// caps every collective between racks (allgather and reduce-scatter too: not measured). The 2-rack
		// row checks the NVLS tree (a ring at 8 NICs would reach half of it), not the 8.
		Channels: 8, NVLSTree: true,
		// Between NVL72 racks: one ConnectX-7 400 Gb/s NIC per GPU (DGX GB200 compute tray: 4 per tray of 4 GPUs),
		// 48 GB/s reached as on an NDR rail (nccl-tests#290).
		Inter:  Link{Latency: 5 * time.Microsecond, Bandwidth: 48e9},
		Source: "NVIDIA GB200 NVL72 datasheet (NVLink 1.8 TB/s, 72 GPUs); DGX GB200 user guide (ConnectX-7 400 Gb/s per GPU); nccl-tests#290 (46-48 GB/s per NIC); coreweave/nccl-tests README (NVL72 all_reduce 834.6 GB/s)"},
}

// Names lists the presets, sorted.
func Names() []string {
	out := make([]string, 0, len(Fabrics))
	for k := range Fabrics {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Parse returns the named preset; the error lists the valid ones.
func Parse(name string) (Fabric, error) {
	f, ok := Fabrics[name]
	if !ok {
		return Fabric{}, fmt.Errorf("fabric: unknown fabric %q (valid: %s)", name, strings.Join(Names(), ", "))
	}
	return f, nil
}

// Node is the node of a world rank.
func (f Fabric) Node(worldRank int) int {
	if f.RanksPerNode <= 0 {
		return 0
	}
	return worldRank / f.RanksPerNode
}

// Between is the link from world rank a to world rank b.
func (f Fabric) Between(a, b int) Link {
	if f.Node(a) == f.Node(b) {
		return f.Intra
	}
	return f.Inter
}

// span is the slowest link a group's ring crosses: Inter when its members
// sit on more than one node.
func (f Fabric) span(members []int) Link {
	if !f.oneNode(members) {
		return f.Inter
	}
	return f.Intra
}

// perNode is how many of members sit on each node.
func (f Fabric) perNode(members []int) map[int]int {
	per := map[int]int{}
	for _, m := range members {
		per[f.Node(m)]++
	}
	return per
}

func (f Fabric) oneNode(members []int) bool {
	for _, m := range members[1:] {
		if f.Node(m) != f.Node(members[0]) {
			return false
		}
	}
	return true
}

// bus is the bus bandwidth a ring over members reaches (0: infinite):
// within a node the ring's (Ring, else the link's peak); across nodes the
// lesser of that and the rails between them: one channel per NIC its
// fewest-member node can use (nics), each at Inter.Bandwidth.
func (f Fabric) bus(members []int) float64 {
	intra := f.Ring
	if intra == 0 {
		intra = f.Intra.Bandwidth
	}
	if f.oneNode(members) {
		return intra
	}
	if f.Inter.Bandwidth == 0 {
		return intra
	}
	per := f.perNode(members)
	fewest := len(members)
	for _, n := range per {
		fewest = min(fewest, n)
	}
	inter := float64(f.nics(fewest)) * f.Inter.Bandwidth
	if intra == 0 || inter < intra {
		return inter
	}
	return intra
}

// nics is how many NICs a node whose group has k members drives between
// nodes: one a member, up to its rails and Channels.
func (f Fabric) nics(k int) int {
	n := min(max(f.Rails, 1), k)
	if f.Channels > 0 {
		n = min(n, f.Channels)
	}
	return n
}

// Collective is the time a collective of kind takes over members (world
// ranks), bytes being the payload per rank (allreduce, bcast) or in all
// (allgather), by the algorithms NCCL chooses among: an allreduce is the
// fastest of a ring (2(p-1) steps moving 2(p-1)/p of the payload), a
// double binary tree (2 ceil(log2 p) steps, the payload twice: small
// messages), within a node whose switch has it NVLink SHARP (NVLS bus
// bandwidth, charged a ring's steps: no published latency of its own, so
// it wins on bandwidth alone, for large messages) and, across nodes whose
// fabric allows it, an NVLS tree (nvlsTree); ring allgather and
// reduce-scatter p-1 steps moving (p-1)/p of the total. These ring-like
// collectives run at the bus bandwidth (bus: across nodes, every rail up
// to Channels).
// Binomial-tree bcast, reduce, gather and scatter and a dissemination
// barrier send whole messages rank to rank, each at its slowest link's
// bandwidth (one NIC across nodes). An alltoall posts every peer's message
// at once (alltoall below).
func (f Fabric) Collective(kind flight.Kind, members []int, bytes int) time.Duration {
	p := len(members)
	if p < 2 {
		return 0
	}
	l := f.span(members)
	at := func(k int, moved, bw float64) time.Duration {
		t := time.Duration(k) * l.Latency
		if bw > 0 {
			t += time.Duration(moved / bw * float64(time.Second))
		}
		return t
	}
	// steps: whole messages rank to rank, over the slowest link.
	steps := func(k int, moved float64) time.Duration { return at(k, moved, l.Bandwidth) }
	rounds := bits.Len(uint(p - 1)) // ceil(log2 p)
	switch kind {
	case flight.KindAllreduce:
		bus := f.bus(members)
		ring := at(2*(p-1), 2*float64(p-1)/float64(p)*float64(bytes), bus)
		tree := at(2*rounds, 2*float64(bytes), bus)
		best := min(ring, tree)
		if f.NVLS > 0 && f.oneNode(members) {
			best = min(best, at(2*(p-1), 2*float64(p-1)/float64(p)*float64(bytes), f.NVLS))
		}
		if t, ok := f.nvlsTree(members, bytes); ok {
			best = min(best, t)
		}
		return best
	case flight.KindAllgather, flight.KindSplit:
		return at(p-1, float64(p-1)/float64(p)*float64(bytes), f.bus(members))
	case flight.KindBcast, flight.KindReduce:
		// A binomial tree: log2 p rounds, the whole buffer each.
		return steps(rounds, float64(rounds)*float64(bytes))
	case flight.KindGather, flight.KindScatter:
		// A binomial tree whose messages grow to half the root's buffer
		// (bytes: the root's whole buffer, the larger of send and receive).
		return steps(rounds, float64(p-1)/float64(p)*float64(bytes))
	case flight.KindAlltoall:
		return f.alltoall(members, bytes)
	case flight.KindReduceScatter:
		// A ring: p-1 steps of 1/p of the buffer.
		return at(p-1, float64(p-1)/float64(p)*float64(bytes), f.bus(members))
	case flight.KindBarrier:
		return steps(rounds, 0)
	}
	return 0
}

// nvlsTree is NCCL's NVLS tree allreduce over members that span nodes
// whose switches have NVLink SHARP, the same number k >= 2 on each of r
// nodes: within a node NVLink SHARP reduces the buffer and shares the
// result (a ring's 2(k-1) steps and 2(k-1)/k of the buffer at NVLS);
// between nodes a double binary tree (2 ceil(log2 r) steps) moves the
// node's reduced buffer 2(r-1)/r times over (once each way between two
// nodes; an inner node of a deeper tree takes from two children) through
// the NICs it drives (nics). The
// phases are pipelined: the slower sets the pace, each pays its steps.
// ok is false where it does not apply.
func (f Fabric) nvlsTree(members []int, bytes int) (time.Duration, bool) {
	if !f.NVLSTree || f.NVLS <= 0 || f.oneNode(members) {
		return 0, false
	}
	per := f.perNode(members)
	k := per[f.Node(members[0])]
	for _, n := range per {
		if n != k {
			return 0, false
		}
	}
	if k < 2 {
		return 0, false
	}
	r := len(per)
	secs := func(moved, bw float64) float64 {
		if bw <= 0 {
			return 0
		}
		return moved / bw
	}
	within := secs(2*float64(k-1)/float64(k)*float64(bytes), f.NVLS)
	between := secs(2*float64(r-1)/float64(r)*float64(bytes), float64(f.nics(k))*f.Inter.Bandwidth)
	steps := time.Duration(2*(k-1))*f.Intra.Latency + time.Duration(2*bits.Len(uint(r-1)))*f.Inter.Latency
	return steps + time.Duration(max(within, between)*float64(time.Second)), true
}

// alltoall is an all-to-all of bytes per rank (1/p of it to each member),
// as NCCL runs one: every peer's send and receive posted at once (one
// group of point-to-point calls), so it pays one latency of its slowest
// link, then each rank's messages leave at its own links' speed: those to
// members on its node over Intra, the others through its own NIC (one
// rail a GPU) over Inter, both at once. The busiest rank counts: the one
// with the fewest members on its node sends the most across.
func (f Fabric) alltoall(members []int, bytes int) time.Duration {
	p := len(members)
	per := f.perNode(members)
	msg := float64(bytes) / float64(p)
	at := func(n int, bw float64) float64 {
		if bw <= 0 || n == 0 {
			return 0
		}
		return float64(n) * msg / bw
	}
	var worst float64
	for _, local := range per {
		worst = max(worst, at(local-1, f.Intra.Bandwidth), at(p-local, f.Inter.Bandwidth))
	}
	return f.span(members).Latency + time.Duration(worst*float64(time.Second))
}

// Validate checks a fabric's figures: every latency and bandwidth finite
// and not negative, its counts not negative, an NVLS tree only with an
// NVLS bandwidth.
func (f Fabric) Validate() error {
	for _, l := range []struct {
		name string
		l    Link
	}{{"intra", f.Intra}, {"inter", f.Inter}} {
		if l.l.Latency < 0 || l.l.Bandwidth < 0 || math.IsNaN(l.l.Bandwidth) || math.IsInf(l.l.Bandwidth, 0) {
			return fmt.Errorf("fabric: fabric %q: %s link %+v: latency and bandwidth must be finite and not negative", f.Name, l.name, l.l)
		}
	}
	if f.RanksPerNode < 0 {
		return fmt.Errorf("fabric: fabric %q: ranks per node %d must not be negative", f.Name, f.RanksPerNode)
	}
	if f.Rails < 0 {
		return fmt.Errorf("fabric: fabric %q: rails %d must not be negative (0: one NIC a node)", f.Name, f.Rails)
	}
	if f.Channels < 0 {
		return fmt.Errorf("fabric: fabric %q: channels %d must not be negative (0: every rail)", f.Name, f.Channels)
	}
	if f.NVLSTree && f.NVLS <= 0 {
		return fmt.Errorf("fabric: fabric %q: nvls tree needs an NVLS bus bandwidth (NVLink SHARP within a node), and nvls is %v", f.Name, f.NVLS)
	}
	for _, b := range []struct {
		name string
		v    float64
	}{{"ring", f.Ring}, {"nvls", f.NVLS}} {
		if b.v < 0 || math.IsNaN(b.v) || math.IsInf(b.v, 0) {
			return fmt.Errorf("fabric: fabric %q: %s bandwidth %v must be finite and not negative", f.Name, b.name, b.v)
		}
	}
	return nil
}
