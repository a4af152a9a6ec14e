package costmodel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/topology"
)

func TestPresetsValidate(t *testing.T) {
	for _, n := range ModelNames() {
		m := Models[n]
		assert.Equal(t, n, m.Name)
		assert.NoError(t, m.Validate(), n)
		assert.NotEmpty(t, m.Source, n)
	}
	for _, n := range HardwareNames() {
		h, err := ParseHardware(n)
		require.NoError(t, err, n)
		assert.NoError(t, h.Validate(), n)
		assert.NotEmpty(t, h.Source, n)
	}
	// Every fabric preset of the sim backend is a hardware preset: one
	// --hardware name picks compute and links.
	for _, n := range []string{"zero", "h100-nvlink-ib400", "h200-nvlink-ib400", "gb200-nvl72"} {
		h, err := ParseHardware(n)
		require.NoError(t, err)
		assert.Equal(t, n, h.Fabric.Name)
	}
	h, err := ParseHardware("h100")
	require.NoError(t, err)
	assert.Equal(t, "h100-nvlink-ib400", h.Name)
}

// The presets' parameter counts are their model cards'.
func TestPresetParams(t *testing.T) {
	for _, c := range []struct {
		name           string
		total, active  float64 // billions, from the model card
		totalTolerance float64
	}{
		{"llama-3-8b", 8.03, 8.03, 0.01},
		{"llama-3-70b", 70.6, 70.6, 0.01},
		{"deepseek-moe-16b", 16.4, 2.8, 0.01},
		{"gpt-oss-120b", 116.8, 5.1, 0.01},
	} {
		m := Models[c.name]
		assert.InEpsilon(t, c.total, m.Params()/1e9, c.totalTolerance, c.name)
		if m.MoE() {
			// Active parameters: the cards count differently (embeddings
			// in or out); within 10%.
			assert.InEpsilon(t, c.active, m.ActiveParams()/1e9, 0.10, c.name)
		}
	}
}

const goodModel = `{"name": "tiny", "layers": 4, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "ffn": 1024,
 "vocab": 1000, "weight_bytes": 2, "kv_bytes": 2}`

const goodHardware = `{"name": "my-gpu", "peak_flops": {"bf16": 1e15}, "hbm_bandwidth": 4e12, "hbm_capacity": 96e9,
 "compute_eff": 0.5, "kv_eff": 0.4, "step_overhead": "1ms", "fabric": {"ranks_per_node": 4, "rails": 4, "channels": 2, "nvls_tree": true, "ring": 3e11, "nvls": 4e11, "intra": {"latency": "2us", "bandwidth": 4e11},
 "inter": {"latency": "6us", "bandwidth": 5e10}}}`

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	mp, hp := filepath.Join(dir, "m.json"), filepath.Join(dir, "h.json")
	require.NoError(t, os.WriteFile(mp, []byte(goodModel), 0o644))
	require.NoError(t, os.WriteFile(hp, []byte(goodHardware), 0o644))
	m, err := ResolveModel(mp)
	require.NoError(t, err)
	assert.Equal(t, 2, m.ActBytes, "act_bytes defaults to 2")
	assert.Equal(t, "bf16", m.Precision)
	assert.Equal(t, 4, m.Geometry(16).Layers)
	h, err := ResolveHardware(hp)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Microsecond, h.Fabric.Intra.Latency)
	assert.Equal(t, 4, h.Fabric.RanksPerNode)
	assert.InDelta(t, 0.5, h.ComputeEffOrDefault(), 0)
	assert.InDelta(t, DefaultMemoryEff, h.MemoryEffOrDefault(), 0)
	assert.InDelta(t, 0.4, h.KVEffOrDefault(), 0)
	assert.Equal(t, time.Millisecond, h.StepOverhead)
	assert.Equal(t, 4, h.Fabric.Rails)
	assert.Equal(t, 2, h.Fabric.Channels)
	assert.True(t, h.Fabric.NVLSTree)
	assert.InDelta(t, 3e11, h.Fabric.Ring, 0)
	none, err := DecodeHardware("d.json", []byte(strings.Replace(goodHardware, `"step_overhead": "1ms", `, ``, 1)))
	require.NoError(t, err)
	assert.Zero(t, none.StepOverhead, "unset: none")
}

// Every bad input is one error line naming the field and the rule (or the
// line of a syntax error), wrapping ErrInvalid.
func TestLoadBadInput(t *testing.T) {
	edit := func(doc, from, to string) string {
		require.Contains(t, doc, from)
		return strings.Replace(doc, from, to, 1)
	}
	for _, c := range []struct {
		name, doc string
		hardware  bool
		want      []string
	}{
		{"syntax", "{\n\"layers\": 4,\n}", false, []string{":3:", "invalid character"}},
		{"unknown field", edit(goodModel, `"ffn"`, `"fnn"`), false, []string{"unknown field", "fnn"}},
		{"wrong type", edit(goodModel, `"layers": 4`, `"layers": "4"`), false, []string{"layers", "want a int"}},
		{"zero layers", edit(goodModel, `"layers": 4`, `"layers": 0`), false, []string{"layers = 0", "[1, 65536] (the KV cache geometry's limit)"}},
		// Accepted here, refused by the KV geometry later: refused here,
		// with the same rule as zero layers.
		{"layers past the geometry", edit(goodModel, `"layers": 4`, `"layers": 1048576`), false, []string{"layers = 1048576", "[1, 65536] (the KV cache geometry's limit)"}},
		// Every field in range, a token's KV past a block's 1 TiB (it was
		// refused only when run, naming Go fields): 65536 x 4 x 2 x 65536
		// x 64 bytes = 2.2e12.
		{"a token's KV past a block", edit(edit(edit(edit(goodModel, `"layers": 4`, `"layers": 65536`), `"head_dim": 32`, `"head_dim": 65536`), `"kv_heads": 2`, `"kv_heads": 4`), `"kv_bytes": 2`, `"kv_bytes": 64`),
			false, []string{"layers = 65536", "a token's KV cache is more than the 1099511627776 bytes (1 TiB)"}},
		{"heads", edit(goodModel, `"heads": 8`, `"heads": 7`), false, []string{"heads = 7", "multiple of kv_heads"}},
		{"weight bytes", edit(goodModel, `"weight_bytes": 2`, `"weight_bytes": -1`), false, []string{"weight_bytes", "(0, 8]"}},
		{"precision", edit(goodModel, `"kv_bytes": 2`, `"kv_bytes": 2, "precision": "fp16"`), false, []string{"precision", "bf16, fp8, fp4"}},
		{"experts", edit(goodModel, `"kv_bytes": 2`, `"kv_bytes": 2, "active_experts": 2`), false, []string{"experts = 0", "must be set"}},
		{"active experts", edit(goodModel, `"kv_bytes": 2`, `"kv_bytes": 2, "experts": 4, "active_experts": 5, "expert_ffn": 64`), false,
			[]string{"active_experts = 5", "[1, experts (4)]"}},
		{"two values", goodModel + goodModel, false, []string{"more than one JSON value"}},
		// They said "invalid description: EOF" and "field : want a
		// costmodel.Model, got a JSON array".
		{"empty", "", false, []string{"the file is empty (want one JSON object)"}},
		{"blank", " \n", false, []string{"the file is empty (want one JSON object)"}},
		{"an array", "[1, 2]", false, []string{"the file holds a JSON array (want one JSON object)"}},
		{"a number", "42", true, []string{"the file holds a JSON number (want one JSON object)"}},
		{"no peak", edit(goodHardware, `{"bf16": 1e15}`, `{}`), true, []string{"peak_flops", "at least one precision"}},
		{"bad precision", edit(goodHardware, `"bf16": 1e15`, `"fp16": 1e15`), true, []string{"peak_flops", `"fp16"`}},
		{"negative bandwidth", edit(goodHardware, `"hbm_bandwidth": 4e12`, `"hbm_bandwidth": -4e12`), true, []string{"hbm_bandwidth", "positive"}},
		// The unit mistakes that overflowed a step into garbage (TFLOPS,
		// TB/s, GB where the file takes FLOP/s, bytes/s, bytes).
		{"peak in TFLOPS", edit(goodHardware, `"bf16": 1e15`, `"bf16": 989`), true, []string{"peak_flops.bf16 = 989", "FLOP/s, not TFLOPS"}},
		{"bandwidth in TB/s", edit(goodHardware, `"hbm_bandwidth": 4e12`, `"hbm_bandwidth": 3.35`), true, []string{"hbm_bandwidth = 3.35", "bytes/s, not TB/s"}},
		{"capacity in GB", edit(goodHardware, `"hbm_capacity": 96e9`, `"hbm_capacity": 96`), true, []string{"hbm_capacity = 96", "bytes, not GB"}},
		{"no compute", `{"name": "links"}`, true, []string{"no peak_flops", "compute figures"}},
		{"efficiency", edit(goodHardware, `"compute_eff": 0.5`, `"compute_eff": 1.5`), true, []string{"compute_eff = 1.5", "[0.01, 1]"}},
		{"latency", edit(goodHardware, `"2us"`, `"2 parsecs"`), true, []string{"fabric.intra.latency", "duration"}},
		{"link bandwidth", edit(goodHardware, `"bandwidth": 4e11`, `"bandwidth": -1`), true, []string{"fabric.intra.bandwidth", "at least 1e6 bytes/s"}},
		// A collective's time ran past a Duration and wrapped: a TP
		// allreduce at 1e-300 bytes/s, or over a 1,000,000 h link, came
		// out free.
		{"tiny link bandwidth", edit(goodHardware, `"bandwidth": 4e11`, `"bandwidth": 1e-300`), true, []string{"fabric.intra.bandwidth = 1e-300", "0 (infinite) or a finite number of at least 1e6 bytes/s"}},
		{"long link latency", edit(goodHardware, `"2us"`, `"1000000h"`), true, []string{"fabric.intra.latency = 1000000h0m0s", "must be in [0, 1s]"}},
		{"rails", edit(goodHardware, `"rails": 4`, `"rails": -2`), true, []string{"fabric.rails = -2", "not be negative"}},
		{"channels", edit(goodHardware, `"channels": 2`, `"channels": -1`), true, []string{"fabric.channels = -1", "not be negative"}},
		{"nvls tree", edit(goodHardware, `"nvls": 4e11`, `"nvls": 0`), true, []string{"fabric.nvls_tree = true", "needs fabric.nvls > 0"}},
		{"ring", edit(goodHardware, `"ring": 3e11`, `"ring": -3e11`), true, []string{"fabric.ring", "at least 1e6 bytes/s"}},
		{"tiny ring", edit(goodHardware, `"ring": 3e11`, `"ring": 1`), true, []string{"fabric.ring = 1", "at least 1e6 bytes/s"}},
		{"step overhead", edit(goodHardware, `"1ms"`, `"-1ms"`), true, []string{"step_overhead", ">= 0"}},
		{"kv efficiency", edit(goodHardware, `"kv_eff": 0.4`, `"kv_eff": -0.4`), true, []string{"kv_eff = -0.4", "[0.01, 1]"}},
		// A tiny efficiency ran a step past int64's nanoseconds: a
		// negative step, or a sum of saturated stages wrapped to 2 ms.
		{"tiny efficiency", edit(goodHardware, `"kv_eff": 0.4`, `"kv_eff": 1e-300`), true, []string{"kv_eff = 1e-300", "[0.01, 1]"}},
		{"tiny memory efficiency", edit(goodHardware, `"kv_eff": 0.4`, `"kv_eff": 0.4, "memory_eff": 1e-12`), true, []string{"memory_eff = 1e-12", "[0.01, 1]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.hardware {
				_, err = DecodeHardware("x.json", []byte(c.doc))
			} else {
				_, err = DecodeModel("x.json", []byte(c.doc))
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid), "%v", err)
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, "x.json"), "names the file: %s", msg)
			assert.NotContains(t, msg, "\n")
			for _, w := range c.want {
				assert.Contains(t, msg, w)
			}
		})
	}
	_, err := ResolveModel("no-such-model")
	assert.ErrorContains(t, err, "llama-3-8b")
	_, err = ResolveHardware("no-such-gpu")
	assert.ErrorContains(t, err, "h100")
}

// Decoders never panic, and whatever they accept validates.
func FuzzDecodeModel(f *testing.F) {
	f.Add([]byte(goodModel))
	f.Add([]byte(`{"layers": 1e30}`))
	f.Add([]byte(`{"experts": 8, "active_experts": 9}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeModel("f.json", b)
		if err == nil {
			require.NoError(t, m.Validate())
			_ = m.Params()
		}
	})
}

func FuzzDecodeHardware(f *testing.F) {
	f.Add([]byte(goodHardware))
	f.Add([]byte(`{"peak_flops": {"bf16": NaN}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHardware("f.json", b)
		if err == nil {
			require.NoError(t, h.Validate())
		}
	})
}

// The model cards' memory claims: gpt-oss-120b (MXFP4 experts) runs on one
// 80 GB GPU; Llama-3-70B in bf16 does not, and needs two.
func TestPresetFits(t *testing.T) {
	h100 := Hardwares["h100-nvlink-ib400"]
	one := topology.Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	two := topology.Layout{TP: 2, PP: 1, CP: 1, DP: 1}
	assert.NoError(t, Placement{Model: Models["gpt-oss-120b"], HW: h100}.Fits(one))
	assert.Error(t, Placement{Model: Models["llama-3-70b"], HW: h100}.Fits(one))
	assert.NoError(t, Placement{Model: Models["llama-3-70b"], HW: h100}.Fits(two))
}

// A hardware file may give a precision its own efficiency; the others
// keep compute_eff. A precision the model does not know, or an efficiency
// outside [0.01, 1], is refused naming the field.
func TestHardwareComputeEffByPrecision(t *testing.T) {
	base := `{"name": "x", "peak_flops": {"bf16": 1e15, "fp4": 4e15}, "hbm_bandwidth": 3e12, "hbm_capacity": 80e9, "compute_eff": 0.5, %s}`
	h, err := DecodeHardware("x.json", []byte(fmt.Sprintf(base, `"compute_eff_by_precision": {"fp4": 0.25}`)))
	require.NoError(t, err)
	assert.InDelta(t, 0.25, h.ComputeEffFor("fp4"), 0)
	assert.InDelta(t, 0.5, h.ComputeEffFor("bf16"), 0)
	for _, c := range []struct{ by, want string }{
		{`"compute_eff_by_precision": {"fp6": 0.25}`, `compute_eff_by_precision = "fp6": precisions are bf16, fp8 and fp4`},
		{`"compute_eff_by_precision": {"fp4": 1.5}`, `compute_eff_by_precision.fp4 = 1.5: must be in [0.01, 1]`},
		{`"compute_eff_by_precision": {"fp4": 0}`, `compute_eff_by_precision.fp4 = 0: must be in [0.01, 1]`},
	} {
		_, err := DecodeHardware("x.json", []byte(fmt.Sprintf(base, c.by)))
		require.Error(t, err, c.by)
		assert.Contains(t, err.Error(), c.want)
	}
	// The GB200 preset's FP4 efficiency is its fitted one; its BF16 takes
	// the default.
	gb := Hardwares["gb200-nvl72"]
	assert.InDelta(t, GB200FP4ComputeEff, gb.ComputeEffFor("fp4"), 0)
	assert.InDelta(t, DefaultComputeEff, gb.ComputeEffFor("bf16"), 0)
}

// A model's experts may compute at their own precision; a precision the
// model does not know, or one on a dense model, is refused by name; the
// hardware must have the experts' peak too.
func TestExpertPrecision(t *testing.T) {
	m := Models["deepseek-r1-fp4"]
	require.NoError(t, m.Validate())
	assert.Equal(t, "fp4", m.expertPrecision())
	bad := m
	bad.ExpertPrecision = "fp6"
	assert.ErrorContains(t, bad.Validate(), `expert_precision = "fp6": must be "" (as precision) or one of bf16, fp8, fp4`)
	dense := Models["llama-3-8b"]
	dense.ExpertPrecision = "fp8"
	assert.ErrorContains(t, dense.Validate(), `expert_precision = "fp8": a dense model has no experts`)
	noFP4 := Placement{Model: m, HW: Hardwares["h100-nvlink-ib400"]}
	assert.ErrorContains(t, noFP4.Validate(), `has no fp4 peak (model "deepseek-r1-fp4" computes its experts in fp4)`)
	// Its attention computes at FP8: the FP8 peak, not FP4's, prices it.
	l := topology.Layout{TP: 8, PP: 1, CP: 1, DP: 1}
	p := Placement{Model: m, HW: Hardwares["gb200-nvl72"], Ctx: l, Gen: l}
	allFP4 := p
	allFP4.Model.Precision, allFP4.Model.ExpertPrecision = "fp4", ""
	assert.Greater(t, p.Prefill([]Seq{{Tokens: 8192}}), allFP4.Prefill([]Seq{{Tokens: 8192}}), "FP8 attention is slower than FP4 would be")
}

// A model file may limit a token's experts to some groups (DeepSeek-V3's
// n_group and topk_group, as expert_groups and groups_per_token); the
// model's Routing carries them to the runtime and the cost model, and a
// bad pair is refused by name.
func TestExpertGroups(t *testing.T) {
	ds := Models["deepseek-r1"]
	assert.Equal(t, topology.Routing{Experts: 256, TopK: 8, Groups: 8, GroupsPerToken: 4}, ds.Routing())
	assert.Equal(t, ds.Routing(), Models["deepseek-r1-fp4"].Routing())
	assert.Equal(t, topology.Routing{Experts: 128, TopK: 4}, Models["gpt-oss-120b"].Routing(), "no groups")
	assert.Zero(t, Models["llama-3-8b"].Routing(), "dense")
	moe := `{"name": "g", "layers": 4, "hidden": 512, "heads": 8, "kv_heads": 8, "head_dim": 64, "vocab": 1000,
		"weight_bytes": 2, "kv_bytes": 2, "precision": "bf16", "experts": 16, "active_experts": 4, "expert_ffn": 256%s}`
	m, err := DecodeModel("g.json", []byte(fmt.Sprintf(moe, `, "expert_groups": 4, "groups_per_token": 2`)))
	require.NoError(t, err)
	assert.Equal(t, topology.Routing{Experts: 16, TopK: 4, Groups: 4, GroupsPerToken: 2}, m.Routing())
	for _, c := range []struct{ keys, want string }{
		{`, "expert_groups": 3, "groups_per_token": 1`, `expert_groups = 3: must divide experts (16)`},
		{`, "groups_per_token": 2`, `groups_per_token = 2: needs expert_groups`},
		{`, "expert_groups": 4`, `groups_per_token = 0: must be in [1, expert_groups (4)]`},
		{`, "expert_groups": 4, "groups_per_token": 5`, `groups_per_token = 5: must be in [1, expert_groups (4)]`},
		{`, "expert_groups": 8, "groups_per_token": 1`, `groups_per_token = 1: its groups hold 2 experts, fewer than active_experts (4)`},
		{`, "expert_groups": -2, "groups_per_token": 1`, `expert_groups = -2: must be an integer in [0, 1048576]`},
	} {
		_, err := DecodeModel("g.json", []byte(fmt.Sprintf(moe, c.keys)))
		require.Error(t, err, c.keys)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), c.want)
	}
	dense := Models["llama-3-8b"]
	dense.ExpertGroups, dense.GroupsPerToken = 4, 2
	assert.ErrorContains(t, dense.Validate(), "experts = 0: must be set (> 0) when active_experts, shared_experts, expert_ffn, dense_layers, expert_groups or groups_per_token is")
	for _, d := range [][2]int{{4, 0}, {0, 2}} {
		dense := Models["llama-3-8b"]
		dense.ExpertGroups, dense.GroupsPerToken = d[0], d[1]
		assert.ErrorContains(t, dense.Validate(), "experts = 0: must be set (> 0)", "expert_groups %d, groups_per_token %d", d[0], d[1])
	}
}
