package costmodel

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rankrun/rankrun/fabric"
)

// Default efficiency factors: the achieved fraction of peak a model's
// kernels reach. They are parameters (Hardware.ComputeEff, MemoryEff,
// KVEff; a hardware file or --compute-eff / --memory-eff / --kv-eff set
// them).
const (
	// DefaultComputeEff: TensorRT-LLM v0.5 prefilled 2048 tokens of
	// LLaMA-7B in FP8 on one H100 in 36 ms (docs/source/performance.md,
	// "Low Latency"): 41.5% of the H100's dense FP8 peak by this model's
	// FLOP count, once the step's host cost (H100StepOverhead) is taken
	// out. Fitted on that one row; the other rows check it (published.go).
	DefaultComputeEff = 0.415
	// DefaultMemoryEff: the fraction of HBM bandwidth a step's weight
	// reads reach (the KV cache's is DefaultKVEff). 0.8 is an assumption of this model (the
	// order of what bandwidth-bound kernels reach on HBM3), not fitted.
	DefaultMemoryEff = 0.80
	// DefaultKVEff: the fraction of HBM bandwidth attention reaches
	// reading and writing the paged KV cache (a decode step's gathers of
	// every context's blocks, below a weight read's streaming). Fitted on
	// one row, rounded (0.7497): TensorRT-LLM's Llama-3.3-70B FP8
	// throughput on two H100s at 2048 in / 2048 out (perf-overview.md), as
	// the table measured it (Benchmark: its 1,500 requests under
	// trtllm-bench's scheduler, TRTLLMBench), attention a kernel of its own
	// after the GEMMs (side.roofline). The other throughput rows are held
	// out (published.go).
	DefaultKVEff = 0.75
	// H100StepOverhead is the fixed host cost of one forward step
	// (kernel launches, sampling, scheduling) on top of its roofline
	// time, on the H100 presets. Fitted on one row: NVIDIA NeMo's
	// Llama-2-7B latency on one H100, batch 1, 128 tokens in and 20 out,
	// 153.8 ms (the NeMo Framework "Llama performance" page), of which
	// this model's rooflines explain 104.15 ms over the prefill and 20
	// decode steps: (153.8 - 104.15) / 21 steps, rounded. Its TP 2, 4 and
	// 8 rows are held out (published.go). The H200 preset takes it too
	// (the same node, host and software); GB200 has no published row to
	// fit one on and takes none. Under an overlap scheduler
	// (Scheduler.Overlap) it hides behind the GPU's time.
	H100StepOverhead = 2360 * time.Microsecond
	// GB200FP4ComputeEff and GB200KVEff are the GB200 preset's achieved
	// fractions of its FP4 peak and of its HBM bandwidth moving KV cache,
	// fitted together on one column of TensorRT-LLM's throughput table:
	// Llama-3.3-70B NVFP4 on one GB200 (perf-overview.md), ten sequence
	// shapes measured as the table was (Benchmark, TRTLLMBench), on a grid
	// of 0.01 minimising the largest error (12.1%; at the H100 presets'
	// 0.415 and 0.75 the model runs up to 1.46x fast). The
	// Llama-3.1-405B TP4 column beside it is held out (published.go).
	GB200FP4ComputeEff = 0.35
	GB200KVEff         = 0.53
)

// The least figures Validate takes for a GPU's compute, bandwidth and
// memory: far below any accelerator's (an H100's are 9.89e14 FLOP/s,
// 3.35e12 bytes/s and 8e10 bytes), and far above the same figure written
// in TFLOPS, TB/s or GB, the mistake they catch.
const (
	minPeakFLOPs    = 1e9
	minHBMBandwidth = 1e9
	minHBMCapacity  = 1e9
)

// A fabric's links: latency at most 1 s and bandwidth 0 (infinite) or at
// least 1e6 bytes/s, a thousand times below any datacenter link and far
// above the figure of a unit mistake; past them a collective's time ran
// beyond a Duration and wrapped (a TP allreduce at 1e-300 bytes/s came
// out free).
const (
	maxLinkLatency   = time.Second
	minLinkBandwidth = 1e6
)

func linkBandwidthOK(b float64) bool {
	return b == 0 || (b >= minLinkBandwidth && !math.IsInf(b, 0))
}

// MinEff is the least achieved fraction of a peak Validate takes (and the
// --compute-eff, --memory-eff and --kv-eff flags): 1%. Below it a step's
// time runs past what a Duration holds (1e-300 gave a negative step).
const MinEff = 0.01

// EffOK says whether e is an achieved fraction Validate takes: in
// [MinEff, 1], or 0 (the default) where zero is.
func EffOK(e float64, zero bool) bool { return effOK(e, zero) }

func effOK(e float64, zero bool) bool { return (zero && e == 0) || (e >= MinEff && e <= 1) }

// Hardware is one GPU of a cluster and the links between them: dense peak
// FLOPs by matmul precision, HBM bandwidth and capacity, the achieved
// fractions of both, and the fabric (fabric.Fabric: NVLink within a node,
// InfiniBand across) the sim backend's link model uses too.
type Hardware struct {
	Name         string
	PeakFLOPs    map[string]float64 // dense FLOP/s per GPU by precision (bf16, fp8, fp4)
	HBMBandwidth float64            // bytes/s per GPU
	HBMCapacity  float64            // bytes per GPU
	ComputeEff   float64            // achieved fraction of PeakFLOPs (0: DefaultComputeEff)
	// ComputeEffBy is the achieved fraction of one precision's peak
	// where it differs from ComputeEff (a precision missing: ComputeEff).
	ComputeEffBy map[string]float64
	MemoryEff    float64 // achieved fraction of HBMBandwidth reading weights (0: DefaultMemoryEff)
	KVEff        float64 // achieved fraction of HBMBandwidth moving KV cache (0: DefaultKVEff)
	// StepOverhead is the fixed host cost of a forward step (0: none).
	StepOverhead time.Duration
	Fabric       fabric.Fabric
	Source       string
}

// Compute reports whether h carries compute figures (the zero preset does
// not: control plane and links only).
func (h Hardware) Compute() bool {
	return h.HBMBandwidth != 0 || h.HBMCapacity != 0 || len(h.PeakFLOPs) > 0
}

// ComputeEffOrDefault is ComputeEff, or DefaultComputeEff when unset.
func (h Hardware) ComputeEffOrDefault() float64 { return h.computeEff() }

// ComputeEffFor is the achieved fraction of precision's peak:
// ComputeEffBy's where it has one, else ComputeEffOrDefault.
func (h Hardware) ComputeEffFor(precision string) float64 {
	if e := h.ComputeEffBy[precision]; e > 0 {
		return e
	}
	return h.computeEff()
}

// MemoryEffOrDefault is MemoryEff, or DefaultMemoryEff when unset.
func (h Hardware) MemoryEffOrDefault() float64 { return h.memoryEff() }

// KVEffOrDefault is KVEff, or DefaultKVEff when unset.
func (h Hardware) KVEffOrDefault() float64 {
	if h.KVEff > 0 {
		return h.KVEff
	}
	return DefaultKVEff
}

// computeEff and memoryEff apply the defaults.
func (h Hardware) computeEff() float64 {
	if h.ComputeEff > 0 {
		return h.ComputeEff
	}
	return DefaultComputeEff
}

func (h Hardware) memoryEff() float64 {
	if h.MemoryEff > 0 {
		return h.MemoryEff
	}
	return DefaultMemoryEff
}

// Peak is the dense peak for precision, 0 when h has none.
func (h Hardware) Peak(precision string) float64 { return h.PeakFLOPs[precision] }

// Validate names the first field that breaks its rule.
func (h Hardware) Validate() error {
	bad := func(field, rule string, v any) error {
		return fmt.Errorf("%w: hardware %q: %s = %v: %s", ErrInvalid, h.Name, field, v, rule)
	}
	if !h.Compute() {
		return h.validateFabric()
	}
	if len(h.PeakFLOPs) == 0 {
		return bad("peak_flops", "needs at least one precision (bf16, fp8, fp4)", "{}")
	}
	for _, p := range sortedKeys(h.PeakFLOPs) {
		if !slices.Contains(Precisions, p) {
			return bad("peak_flops", "precisions are bf16, fp8 and fp4", fmt.Sprintf("%q", p))
		}
		if !finitePositive(h.PeakFLOPs[p]) {
			return bad("peak_flops."+p, "must be a positive number (FLOP/s)", h.PeakFLOPs[p])
		}
		if h.PeakFLOPs[p] < minPeakFLOPs {
			return bad("peak_flops."+p, "must be at least 1e9: the unit is FLOP/s, not TFLOPS (989 TFLOPS is 9.89e14)", h.PeakFLOPs[p])
		}
	}
	switch {
	case !finitePositive(h.HBMBandwidth):
		return bad("hbm_bandwidth", "must be a positive number (bytes/s)", h.HBMBandwidth)
	case h.HBMBandwidth < minHBMBandwidth:
		return bad("hbm_bandwidth", "must be at least 1e9: the unit is bytes/s, not TB/s (3.35 TB/s is 3.35e12)", h.HBMBandwidth)
	case !finitePositive(h.HBMCapacity):
		return bad("hbm_capacity", "must be a positive number (bytes)", h.HBMCapacity)
	case h.HBMCapacity < minHBMCapacity:
		return bad("hbm_capacity", "must be at least 1e9: the unit is bytes, not GB (80 GB is 8e10)", h.HBMCapacity)
	case !effOK(h.ComputeEff, true):
		return bad("compute_eff", "must be in [0.01, 1] (0: the default)", h.ComputeEff)
	}
	for _, p := range sortedKeys(h.ComputeEffBy) {
		e := h.ComputeEffBy[p]
		switch {
		case !slices.Contains(Precisions, p):
			return bad("compute_eff_by_precision", "precisions are bf16, fp8 and fp4", fmt.Sprintf("%q", p))
		case !effOK(e, false):
			return bad("compute_eff_by_precision."+p, "must be in [0.01, 1]", e)
		}
	}
	switch {
	case !effOK(h.MemoryEff, true):
		return bad("memory_eff", "must be in [0.01, 1] (0: the default)", h.MemoryEff)
	case !effOK(h.KVEff, true):
		return bad("kv_eff", "must be in [0.01, 1] (0: the default)", h.KVEff)
	case h.StepOverhead < 0:
		return bad("step_overhead", "must not be negative (0: none)", h.StepOverhead)
	}
	return h.validateFabric()
}

func (h Hardware) validateFabric() error {
	for _, l := range []struct {
		name string
		l    fabric.Link
	}{{"intra", h.Fabric.Intra}, {"inter", h.Fabric.Inter}} {
		if l.l.Latency < 0 || l.l.Latency > maxLinkLatency {
			return fmt.Errorf("%w: hardware %q: fabric.%s.latency = %v: must be in [0, 1s]", ErrInvalid, h.Name, l.name, l.l.Latency)
		}
		if !linkBandwidthOK(l.l.Bandwidth) {
			return fmt.Errorf("%w: hardware %q: fabric.%s.bandwidth = %v: must be 0 (infinite) or a finite number of at least 1e6 bytes/s",
				ErrInvalid, h.Name, l.name, l.l.Bandwidth)
		}
	}
	if h.Fabric.RanksPerNode < 0 {
		return fmt.Errorf("%w: hardware %q: fabric.ranks_per_node = %d: must not be negative (0: one node)", ErrInvalid, h.Name, h.Fabric.RanksPerNode)
	}
	if h.Fabric.Rails < 0 {
		return fmt.Errorf("%w: hardware %q: fabric.rails = %d: must not be negative (0: one NIC a node)", ErrInvalid, h.Name, h.Fabric.Rails)
	}
	if h.Fabric.Channels < 0 {
		return fmt.Errorf("%w: hardware %q: fabric.channels = %d: must not be negative (0: every rail)", ErrInvalid, h.Name, h.Fabric.Channels)
	}
	if h.Fabric.NVLSTree && !(h.Fabric.NVLS > 0) {
		return fmt.Errorf("%w: hardware %q: fabric.nvls_tree = true: needs fabric.nvls > 0 (NVLink SHARP within a node)", ErrInvalid, h.Name)
	}
	for _, b := range []struct {
		name string
		v    float64
		zero string
	}{{"ring", h.Fabric.Ring, "the intra link's peak"}, {"nvls", h.Fabric.NVLS, "none"}} {
		if !linkBandwidthOK(b.v) {
			return fmt.Errorf("%w: hardware %q: fabric.%s = %v: must be 0 (%s) or a finite number of at least 1e6 bytes/s", ErrInvalid, h.Name, b.name, b.v, b.zero)
		}
	}
	return nil
}

// Hardwares are the hardware presets, keyed by the sim backend's fabric
// names (so one --hardware name picks compute and links); Aliases add the
// short names. Figures are per GPU, dense (the datasheets' headline
// numbers for tensor cores are with 2:4 sparsity, twice these).
var Hardwares = map[string]Hardware{
	"zero": {Name: "zero", Fabric: fabric.Fabrics["zero"], Source: "no compute figures: the control plane only"},
	// NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: BF16 1,979
	// and FP8 3,958 TFLOPS with sparsity (989 and 1,979 dense), GPU
	// memory 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s.
	"h100-nvlink-ib400": {Name: "h100-nvlink-ib400", PeakFLOPs: map[string]float64{"bf16": 989e12, "fp8": 1979e12},
		HBMBandwidth: 3.35e12, HBMCapacity: 80e9, StepOverhead: H100StepOverhead, Fabric: fabric.Fabrics["h100-nvlink-ib400"],
		Source: "NVIDIA H100 Tensor Core GPU datasheet (SXM): 989 TFLOPS BF16 / 1,979 FP8 dense, 80 GB HBM3 at 3.35 TB/s; links: " +
			fabric.Fabrics["h100-nvlink-ib400"].Source},
	// NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: the same
	// tensor cores as H100 SXM (BF16 1,979 / FP8 3,958 TFLOPS sparse),
	// 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s.
	"h200-nvlink-ib400": {Name: "h200-nvlink-ib400", PeakFLOPs: map[string]float64{"bf16": 989e12, "fp8": 1979e12},
		HBMBandwidth: 4.8e12, HBMCapacity: 141e9, StepOverhead: H100StepOverhead, Fabric: fabric.Fabrics["h200-nvlink-ib400"],
		Source: "NVIDIA H200 Tensor Core GPU datasheet (SXM): 989 TFLOPS BF16 / 1,979 FP8 dense, 141 GB HBM3e at 4.8 TB/s; links: " +
			fabric.Fabrics["h200-nvlink-ib400"].Source},
	// NVIDIA GB200 NVL72 datasheet, per rack of 72 Blackwell GPUs: FP4
	// 1,440 PFLOPS, FP8 720 PFLOPS, BF16 360 PFLOPS (with sparsity), up to
	// 13.4 TB HBM3e at 576 TB/s. Per GPU and dense: 10 / 5 / 2.5 PFLOPS,
	// 186 GB at 8 TB/s.
	// Its FP4 matmuls' efficiency and its KV efficiency are fitted
	// (GB200FP4ComputeEff, GB200KVEff). The KV efficiency holds at every
	// precision (it is attention's, fitted with FP8 KV); BF16 and FP8
	// matmuls take the default compute efficiency, unchecked (no
	// published GB200 row runs them).
	"gb200-nvl72": {Name: "gb200-nvl72", PeakFLOPs: map[string]float64{"bf16": 2.5e15, "fp8": 5e15, "fp4": 10e15},
		ComputeEffBy: map[string]float64{"fp4": GB200FP4ComputeEff}, KVEff: GB200KVEff,
		HBMBandwidth: 8e12, HBMCapacity: 186e9, Fabric: fabric.Fabrics["gb200-nvl72"],
		Source: "NVIDIA GB200 NVL72 datasheet: 360 / 720 / 1,440 PFLOPS BF16 / FP8 / FP4 sparse per 72 GPUs, 13.4 TB HBM3e at 576 TB/s; links: " +
			fabric.Fabrics["gb200-nvl72"].Source},
}

// Aliases are short names of the hardware presets.
var Aliases = map[string]string{"h100": "h100-nvlink-ib400", "h200": "h200-nvlink-ib400", "gb200": "gb200-nvl72"}

// HardwareNames lists the presets and their aliases, sorted.
func HardwareNames() []string {
	names := sortedKeys(Hardwares)
	for a := range Aliases {
		names = append(names, a)
	}
	sort.Strings(names)
	return names
}

// ParseHardware returns the named preset (or alias); the error lists the
// valid names.
func ParseHardware(name string) (Hardware, error) {
	if full, ok := Aliases[name]; ok {
		name = full
	}
	h, ok := Hardwares[name]
	if !ok {
		return Hardware{}, fmt.Errorf("costmodel: unknown hardware %q (valid: %s, or a JSON file)", name, strings.Join(HardwareNames(), ", "))
	}
	return h, nil
}
