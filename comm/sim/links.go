package sim

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm"
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
		t += time.Duration(float64(n) / l.Bandwidth * float64(time.Second))
	}
	return t
}

// Fabric is the link model of a cluster: ranks on one node (RanksPerNode of
// them, world ranks in order) talk over Intra, ranks on different nodes over
// Inter. The zero Fabric costs nothing.
type Fabric struct {
	Name         string
	Intra, Inter Link
	RanksPerNode int // 0: every rank on one node
	Source       string
}

// Fabrics are the named presets. Figures are per GPU and per direction;
// each says where it comes from.
var Fabrics = map[string]Fabric{
	"zero": {Name: "zero", Source: "no cost: control-plane only, every figure is the runtime's own"},
	"h100-nvlink-ib400": {Name: "h100-nvlink-ib400", RanksPerNode: 8,
		// NVLink 4: 900 GB/s bidirectional per GPU (NVIDIA H100 Tensor Core GPU datasheet), 450 GB/s a direction;
		// a few microseconds per NVLink/NVSwitch hop as NCCL reports for small messages.
		Intra: Link{Latency: 3 * time.Microsecond, Bandwidth: 450e9},
		// NDR InfiniBand 400 Gb/s per GPU (ConnectX-7, one NIC per GPU in a DGX H100): 50 GB/s a direction.
		Inter:  Link{Latency: 5 * time.Microsecond, Bandwidth: 50e9},
		Source: "NVIDIA H100 datasheet (NVLink 900 GB/s); DGX H100 user guide (8x ConnectX-7 NDR 400 Gb/s)"},
	"h200-nvlink-ib400": {Name: "h200-nvlink-ib400", RanksPerNode: 8,
		// H200 keeps H100's NVLink 4: 900 GB/s bidirectional (NVIDIA H200 Tensor Core GPU datasheet).
		Intra:  Link{Latency: 3 * time.Microsecond, Bandwidth: 450e9},
		Inter:  Link{Latency: 5 * time.Microsecond, Bandwidth: 50e9},
		Source: "NVIDIA H200 datasheet (NVLink 900 GB/s); HGX H200 reference (ConnectX-7 NDR 400 Gb/s per GPU)"},
	"gb200-nvl72": {Name: "gb200-nvl72", RanksPerNode: 72,
		// NVLink 5: 1.8 TB/s bidirectional per GPU, 72 GPUs in one NVLink domain (NVIDIA GB200 NVL72 datasheet).
		Intra: Link{Latency: 3 * time.Microsecond, Bandwidth: 900e9},
		// Between NVL72 racks: 800 Gb/s per GPU (ConnectX-8 / Quantum-X800): 100 GB/s a direction.
		Inter:  Link{Latency: 5 * time.Microsecond, Bandwidth: 100e9},
		Source: "NVIDIA GB200 NVL72 datasheet (NVLink 1.8 TB/s, 72 GPUs); Quantum-X800 XDR 800 Gb/s"},
}

// FabricNames lists the presets, sorted.
func FabricNames() []string {
	out := make([]string, 0, len(Fabrics))
	for k := range Fabrics {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ParseFabric returns the named preset; the error lists the valid ones.
func ParseFabric(name string) (Fabric, error) {
	f, ok := Fabrics[name]
	if !ok {
		return Fabric{}, fmt.Errorf("sim: unknown fabric %q (valid: %s)", name, strings.Join(FabricNames(), ", "))
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
	for _, m := range members[1:] {
		if f.Node(m) != f.Node(members[0]) {
			return f.Inter
		}
	}
	return f.Intra
}

// Collective is the time a collective of kind takes over members (world
// ranks), bytes being the payload per rank (allreduce, bcast) or in all
// (allgather), by the usual algorithms: ring allreduce 2(p-1) steps moving
// 2(p-1)/p of the payload, ring allgather p-1 steps moving (p-1)/p of the
// total, binomial-tree bcast and dissemination barrier in ceil(log2 p)
// rounds.
func (f Fabric) Collective(kind comm.Kind, members []int, bytes int) time.Duration {
	p := len(members)
	if p < 2 {
		return 0
	}
	l := f.span(members)
	steps := func(k int, moved float64) time.Duration {
		t := time.Duration(k) * l.Latency
		if l.Bandwidth > 0 {
			t += time.Duration(moved / l.Bandwidth * float64(time.Second))
		}
		return t
	}
	rounds := bits.Len(uint(p - 1)) // ceil(log2 p)
	switch kind {
	case comm.KindAllreduce:
		return steps(2*(p-1), 2*float64(p-1)/float64(p)*float64(bytes))
	case comm.KindAllgather, comm.KindSplit:
		return steps(p-1, float64(p-1)/float64(p)*float64(bytes))
	case comm.KindBcast, comm.KindReduce:
		// A binomial tree: log2 p rounds, the whole buffer each.
		return steps(rounds, float64(rounds)*float64(bytes))
	case comm.KindGather, comm.KindScatter:
		// A binomial tree whose messages grow to half the root's buffer
		// (bytes: the root's whole buffer, the larger of send and receive).
		return steps(rounds, float64(p-1)/float64(p)*float64(bytes))
	case comm.KindAlltoall:
		// Pairwise exchange: p-1 steps, each rank sending 1/p of its
		// buffer in each.
		return steps(p-1, float64(p-1)/float64(p)*float64(bytes))
	case comm.KindReduceScatter:
		// A ring: p-1 steps of 1/p of the buffer.
		return steps(p-1, float64(p-1)/float64(p)*float64(bytes))
	case comm.KindBarrier:
		return steps(rounds, 0)
	}
	return 0
}

// validate checks a fabric's figures.
func (f Fabric) validate() error {
	for _, l := range []struct {
		name string
		l    Link
	}{{"intra", f.Intra}, {"inter", f.Inter}} {
		if l.l.Latency < 0 || l.l.Bandwidth < 0 || math.IsNaN(l.l.Bandwidth) || math.IsInf(l.l.Bandwidth, 0) {
			return fmt.Errorf("sim: fabric %q: %s link %+v: latency and bandwidth must be finite and not negative", f.Name, l.name, l.l)
		}
	}
	if f.RanksPerNode < 0 {
		return fmt.Errorf("sim: fabric %q: ranks per node %d must not be negative", f.Name, f.RanksPerNode)
	}
	return nil
}
