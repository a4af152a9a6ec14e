package runspec

import (
	"flag"
	"fmt"
	"strings"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/units"
	"github.com/rankrun/rankrun/sweep"
	"github.com/rankrun/rankrun/topology"
)

// registerModel adds the cost model's flags: --model, --hardware and the
// efficiency and sampling knobs.
func (s *Spec) registerModel(fs *flag.FlagSet) {
	fs.StringVar(&s.ModelName, "model", "", "cost model: model preset ("+strings.Join(costmodel.ModelNames(), " | ")+
		") or a JSON file; prefill and decode times then come from the model, the layouts and --hardware, and the KV geometry from the model")
	fs.StringVar(&s.Hardware, "hardware", "zero", "GPU and links: preset ("+strings.Join(costmodel.HardwareNames(), " | ")+
		") or a JSON file; the sim backend's link model, and with --model the compute figures")
	fs.Float64Var(&s.ComputeEff, "compute-eff", 0, fmt.Sprintf("cost model: achieved fraction of peak FLOPs at every precision, in [0.01,1] (0: the hardware's, default %.3g)", costmodel.DefaultComputeEff))
	fs.Float64Var(&s.MemoryEff, "memory-eff", 0, fmt.Sprintf("cost model: achieved fraction of HBM bandwidth reading weights, in [0.01,1] (0: the hardware's, default %.2f)", costmodel.DefaultMemoryEff))
	fs.Float64Var(&s.KVEff, "kv-eff", 0, fmt.Sprintf("cost model: achieved fraction of HBM bandwidth moving the KV cache, in [0.01,1] (0: the hardware's, default %.2f)", costmodel.DefaultKVEff))
	fs.StringVar(&s.Experts, "experts", "", "without --model: a synthetic mixture of experts, E/K (E routed experts, K per token, routed uniformly), so that layouts with ep exchange dispatch counts")
	fs.IntVar(&s.KVSample, "kv-sample", 0, "sim with --model: carry HeadDim/N elements of every KV head and charge the links for all of them "+
		"(1: every byte; 0: 1 but under --backend sim one element of each head (two of a 1-byte element), which proves where every KV tuple lands; the figures are the same whatever the sample)")
}

// NoteSet records which flags the command line set (Set).
func (s *Spec) NoteSet(fs *flag.FlagSet) {
	s.Set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { s.Set[fl.Name] = true })
}

// HardwareProfile resolves --hardware (a preset, an alias or a file).
func (s *Spec) HardwareProfile() (costmodel.Hardware, error) {
	h, err := costmodel.ResolveHardware(s.Hardware)
	if err != nil {
		return h, errorf("--hardware: %v", err)
	}
	return h, nil
}

// applyModel fills c's compute model, KV geometry and pool sizes from
// --model and --hardware. Without --model it leaves c as the geometry and
// per-token flags made it.
func (s *Spec) applyModel(c *executor.Config) error {
	if s.ModelName == "" {
		// --hardware names the links of any backend's run (and is checked
		// whatever the backend), the compute only with --model.
		if _, err := s.HardwareProfile(); err != nil {
			return err
		}
		for _, n := range []string{"compute-eff", "memory-eff", "kv-eff", "kv-sample"} {
			if s.Set[n] {
				return errorf("--%s applies to the cost model: give --model too", n)
			}
		}
		if s.Experts != "" {
			r, err := topology.ParseExperts(s.Experts)
			if err != nil {
				return errorf("--experts: %v", err)
			}
			c.Routing = r
		}
		if s.Routing.Experts > 0 {
			c.Routing = s.Routing
		}
		for _, side := range []struct {
			name string
			l    topology.Layout
		}{{"ctx", c.Ctx}, {"gen", c.Gen}} {
			if side.l.EP > 1 && c.Routing.Experts == 0 {
				return errorf("--%s %s: ep splits a mixture-of-experts model's experts, and without --model there are none: give an MoE --model (deepseek-r1-fp4, gpt-oss-120b, ...), synthetic --experts E/K, or drop ep",
					side.name, side.l)
			}
		}
		return nil
	}
	for _, n := range []string{"layers", "kv-heads", "head-dim", "elem-bytes"} {
		if s.Set[n] {
			return errorf("--%s: the model defines the KV geometry; drop --%s or --model", n, n)
		}
	}
	if s.Experts != "" {
		return errorf("--experts: the model defines its experts; drop --experts or --model")
	}
	m, err := costmodel.ResolveModel(s.ModelName)
	if err != nil {
		return errorf("--model: %v", err)
	}
	hw, err := s.HardwareProfile()
	if err != nil {
		return err
	}
	if !hw.Compute() {
		return errorf("--model %s: --hardware %s has no compute figures (it models links only): pick %s or a hardware file",
			s.ModelName, s.Hardware, strings.Join(ComputeHardware(), ", "))
	}
	for _, e := range []struct {
		name string
		v    float64
		to   *float64
	}{{"compute-eff", s.ComputeEff, &hw.ComputeEff}, {"memory-eff", s.MemoryEff, &hw.MemoryEff}, {"kv-eff", s.KVEff, &hw.KVEff}} {
		if !s.Set[e.name] || e.v == 0 {
			continue // 0: the hardware's, as -h says
		}
		if !costmodel.EffOK(e.v, false) {
			return errorf("--%s %v: must be in [%g, 1] (or 0 for the hardware's)", e.name, e.v, costmodel.MinEff)
		}
		*e.to = e.v
		if e.name == "compute-eff" {
			hw.ComputeEffBy = nil // the flag is every precision's
		}
	}
	p := costmodel.Placement{Model: m, HW: hw, Ctx: c.Ctx, Gen: c.Gen}
	if err := p.Validate(); err != nil {
		return errorf("--model %s on --hardware %s: %v", s.ModelName, s.Hardware, err)
	}
	full := m.Geometry(s.TokensPerBlock)
	if err := full.Validate(); err != nil {
		return errorf("--model %s: %v", s.ModelName, err)
	}
	c.Model = full
	c.Compute = sweep.CostModel{Placement: p}
	c.Routing = m.Routing()
	// Pools: what the HBM left after the weights holds, of the full
	// geometry, but never more than the whole workload needs.
	for _, side := range []struct {
		name   string
		l      topology.Layout
		blocks *int
	}{{"ctx", c.Ctx, &c.CtxBlocks}, {"gen", c.Gen, &c.GenBlocks}} {
		if s.Set[side.name+"-blocks"] {
			continue
		}
		*side.blocks = max(1, min(p.KVBlocks(side.l, full), workloadBlocks(c, side.l, full)))
	}
	if s.KVSample == 0 && s.Backend == "sim" {
		n := defaultSample(full)
		one := full
		one.HeadDim /= n
		if b := poolBytes(c, one); s.hostMemory() > 0 && b > s.hostMemory()/2 {
			return errorf("--model %s: the %d ranks' KV pools take %s in this process even with the default sample of each head (--kv-sample %d), more than half this host's %s: "+
				"give smaller pools (--ctx-blocks, --gen-blocks) or fewer --requests", s.ModelName, c.Ranks(),
				units.Bytes(b), n, units.Bytes(s.hostMemory()))
		}
		if n > 1 {
			s.SampleNote = fmt.Sprintf("; the default sample: %s of each head proves where every (request, block, layer, K/V, head, token) lands (--kv-sample 1 carries every byte)",
				pluralElems(full.HeadDim/n))
		}
	}
	sample, err := s.sample(m)
	if err != nil {
		return err
	}
	c.Model.HeadDim /= sample
	return nil
}

// defaultSample is the --kv-sample divisor of g's head dim that the sim
// backend takes when none is given: the fewest elements of each head that
// make at least 2 bytes (one element of 2 bytes or more). The KV bytes of
// a simulation exist to prove where each (request, block, layer, K/V,
// head, token) lands, and the sampled pattern does that with one value a
// tuple (transceiver.Pattern); a value of one byte would tell only 256
// places apart. The links are charged for every byte whatever the sample,
// so no figure depends on it, and neither memory nor time grows with the
// model's head size or with this host's memory.
func defaultSample(g topology.Model) int {
	elems := 1
	for elems*g.ElemBytes < 2 && elems < g.HeadDim {
		elems++
	}
	for g.HeadDim%elems != 0 {
		elems++
	}
	return g.HeadDim / elems
}

func pluralElems(n int) string {
	if n == 1 {
		return "one element"
	}
	return fmt.Sprintf("%d elements", n)
}

// poolBytes is what c's pools take in one process with KV geometry g (0:
// a layout that cannot shard g).
func poolBytes(c *executor.Config, g topology.Model) int64 {
	var total int64
	for _, side := range []struct {
		l      topology.Layout
		blocks int
	}{{c.Ctx, c.CtxBlocks}, {c.Gen, c.GenBlocks}} {
		s, err := side.l.Shard(g, 0)
		if err != nil {
			return 0
		}
		total += int64(side.blocks) * int64(s.BlockBytes()) * int64(side.l.Ranks())
	}
	return total
}

// sample is the --kv-sample divisor of the head dim of m's KV geometry
// (an MLA latent's included: 288 elements a half for DeepSeek-R1).
func (s *Spec) sample(m costmodel.Model) (int, error) {
	dim := kvHeadDim(m)
	n := s.KVSample
	if n == 0 {
		n = 1
		if s.Backend == "sim" {
			n = defaultSample(m.Geometry(1))
		}
	}
	if n < 1 || dim%n != 0 {
		return 0, errorf("--kv-sample %d: must be a positive divisor of the model's KV head dim (%d)", n, dim)
	}
	if n > 1 && s.Backend != "sim" {
		return 0, errorf("--kv-sample %d: only the sim backend can charge the links for bytes it does not carry; use --backend sim or --kv-sample 1", n)
	}
	return n, nil
}

// workloadBlocks is the most blocks a rank of l can need: every request of
// the workload at its longest.
func workloadBlocks(c *executor.Config, l topology.Layout, geom topology.Model) int {
	s, err := l.Shard(geom, 0)
	if err != nil {
		return 1
	}
	return c.Workload.PoolNeed(s.BlocksFor)
}

// ComputeHardware lists the hardware presets with compute figures (the
// others model links only).
func ComputeHardware() []string {
	var out []string
	for _, n := range costmodel.HardwareNames() {
		if h, _ := costmodel.ParseHardware(n); h.Compute() {
			out = append(out, n)
		}
	}
	return out
}

// kvHeadDim is the head dim of the KV geometry the runtime moves for m.
func kvHeadDim(m costmodel.Model) int { return m.Geometry(1).HeadDim }

// PayloadScale is the sim's link charge per carried byte: the --kv-sample
// divisor (config has checked it).
func (s *Spec) PayloadScale() int {
	if s.ModelName == "" {
		return 1
	}
	m, err := costmodel.ResolveModel(s.ModelName)
	if err != nil {
		return 1
	}
	n, err := s.sample(m)
	if err != nil {
		return 1
	}
	return n
}

// DescribeCompute is the report's compute line for cfg ("" with no cost
// model at all).
func DescribeCompute(cfg *executor.Config) string {
	var parts []string
	if pc, ok := cfg.Compute.(sweep.CostModel); ok {
		m, h := pc.Model, pc.HW
		matmul := fmt.Sprintf("%.0f TFLOPS %s at %.0f%%", h.Peak(m.Precision)/1e12, m.Precision, 100*h.ComputeEffFor(m.Precision))
		if x := m.ExpertPrecision; x != "" && x != m.Precision {
			matmul += fmt.Sprintf(", experts %.0f TFLOPS %s at %.0f%%", h.Peak(x)/1e12, x, 100*h.ComputeEffFor(x))
		}
		s := fmt.Sprintf("%s on %s (%s, %.2f TB/s HBM at %.0f%% for weights and %.0f%% for KV, %v host cost a step)", m.Name, h.Name,
			matmul, h.HBMBandwidth/1e12, 100*h.MemoryEffOrDefault(), 100*h.KVEffOrDefault(), h.StepOverhead)
		if n := kvHeadDim(m) / max(1, cfg.Model.HeadDim); n > 1 {
			s += fmt.Sprintf("; KV sampled 1/%d (links charged for every byte)", n)
		}
		parts = append(parts, s)
	}
	if cfg.PrefillPerToken > 0 {
		parts = append(parts, fmt.Sprintf("prefill %v per token", cfg.PrefillPerToken))
	}
	if cfg.DecodePerStep > 0 {
		parts = append(parts, fmt.Sprintf("decode %v per step", cfg.DecodePerStep))
	}
	if len(parts) > 1 && cfg.Compute != nil {
		parts = append(parts, "the constants override the model")
	}
	return strings.Join(parts, "; ")
}
