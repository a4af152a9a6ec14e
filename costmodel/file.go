package costmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rankrun/rankrun/fabric"
)

// IsFile reports whether a --model or --hardware value names a file rather
// than a preset: it ends in .json or holds a path separator.
func IsFile(v string) bool {
	return strings.HasSuffix(v, ".json") || strings.ContainsRune(v, os.PathSeparator)
}

// ResolveModel returns the preset named v, or the model of the JSON file v.
func ResolveModel(v string) (Model, error) {
	if IsFile(v) {
		return LoadModel(v)
	}
	return ParseModel(v)
}

// ResolveHardware returns the preset (or alias) named v, or the hardware of
// the JSON file v.
func ResolveHardware(v string) (Hardware, error) {
	if IsFile(v) {
		return LoadHardware(v)
	}
	return ParseHardware(v)
}

// LoadModel reads a model description: a JSON object with Model's field
// names (layers, hidden, heads, kv_heads, head_dim, ffn, vocab,
// weight_bytes, kv_bytes, precision, and for MoE experts, active_experts,
// shared_experts, expert_ffn, dense_layers). act_bytes defaults to 2 and
// precision to bf16; an unknown field is an error.
func LoadModel(path string) (Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Model{}, err
	}
	return DecodeModel(path, b)
}

// DecodeModel is LoadModel of the bytes b, read from path (named in errors).
func DecodeModel(path string, b []byte) (Model, error) {
	m := Model{ActBytes: 2, Precision: "bf16"}
	if err := decodeJSON(path, b, &m); err != nil {
		return Model{}, err
	}
	if m.Name == "" {
		m.Name = path
	}
	if err := m.Validate(); err != nil {
		return Model{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// hardwareFile is the JSON form of Hardware.
type hardwareFile struct {
	Name         string             `json:"name"`
	PeakFLOPs    map[string]float64 `json:"peak_flops"`
	HBMBandwidth float64            `json:"hbm_bandwidth"`
	HBMCapacity  float64            `json:"hbm_capacity"`
	ComputeEff   float64            `json:"compute_eff"`
	ComputeEffBy map[string]float64 `json:"compute_eff_by_precision"`
	MemoryEff    float64            `json:"memory_eff"`
	KVEff        float64            `json:"kv_eff"`
	StepOverhead string             `json:"step_overhead"` // a Go duration; "" or "0s": none
	Fabric       struct {
		RanksPerNode int      `json:"ranks_per_node"`
		Rails        int      `json:"rails"`
		Channels     int      `json:"channels"`
		NVLSTree     bool     `json:"nvls_tree"`
		Ring         float64  `json:"ring"`
		NVLS         float64  `json:"nvls"`
		Intra        linkFile `json:"intra"`
		Inter        linkFile `json:"inter"`
	} `json:"fabric"`
	Source string `json:"source"`
}

type linkFile struct {
	Latency   string  `json:"latency"`   // a Go duration: "3us"
	Bandwidth float64 `json:"bandwidth"` // bytes/s, 0: infinite
}

// LoadHardware reads a hardware profile: a JSON object with name,
// peak_flops ({"bf16": FLOP/s, ...}, dense, per GPU), hbm_bandwidth
// (bytes/s), hbm_capacity (bytes), compute_eff, compute_eff_by_precision
// ({"fp4": 0.26}: where a precision's differs), memory_eff, kv_eff and
// step_overhead (a duration, "2ms"; none when unset) (optional), and fabric {ranks_per_node,
// rails (NICs a node), channels (NICs a node drives between nodes; 0:
// every rail), nvls_tree (an allreduce across nodes may run as an NVLS
// tree; needs nvls), ring and nvls (bus bandwidths within a node, bytes/s;
// optional), intra and inter {latency: "3us", bandwidth: bytes/s}}. An
// unknown field is an error.
func LoadHardware(path string) (Hardware, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Hardware{}, err
	}
	return DecodeHardware(path, b)
}

// DecodeHardware is LoadHardware of the bytes b, read from path.
func DecodeHardware(path string, b []byte) (Hardware, error) {
	var f hardwareFile
	if err := decodeJSON(path, b, &f); err != nil {
		return Hardware{}, err
	}
	h := Hardware{Name: f.Name, PeakFLOPs: f.PeakFLOPs, HBMBandwidth: f.HBMBandwidth, HBMCapacity: f.HBMCapacity,
		ComputeEff: f.ComputeEff, ComputeEffBy: f.ComputeEffBy, MemoryEff: f.MemoryEff, KVEff: f.KVEff, Source: f.Source}
	if h.Name == "" {
		h.Name = path
	}
	h.Fabric = fabric.Fabric{Name: h.Name, RanksPerNode: f.Fabric.RanksPerNode, Rails: f.Fabric.Rails, Channels: f.Fabric.Channels, NVLSTree: f.Fabric.NVLSTree, Ring: f.Fabric.Ring, NVLS: f.Fabric.NVLS, Source: f.Source}
	if f.StepOverhead != "" {
		d, err := time.ParseDuration(f.StepOverhead)
		if err != nil || d < 0 {
			return Hardware{}, fmt.Errorf("%s: %w: hardware %q: step_overhead = %q: must be a duration >= 0 such as 2ms (0s or unset: none)", path, ErrInvalid, h.Name, f.StepOverhead)
		}
		h.StepOverhead = d
	}
	for _, l := range []struct {
		name string
		in   linkFile
		out  *fabric.Link
	}{{"intra", f.Fabric.Intra, &h.Fabric.Intra}, {"inter", f.Fabric.Inter, &h.Fabric.Inter}} {
		l.out.Bandwidth = l.in.Bandwidth
		if l.in.Latency == "" {
			continue
		}
		d, err := time.ParseDuration(l.in.Latency)
		if err != nil {
			return Hardware{}, fmt.Errorf("%s: %w: fabric.%s.latency = %q: must be a duration such as 3us", path, ErrInvalid, l.name, l.in.Latency)
		}
		l.out.Latency = d
	}
	if !h.Compute() {
		return Hardware{}, fmt.Errorf("%s: %w: hardware %q: no peak_flops, hbm_bandwidth or hbm_capacity: a hardware file needs compute figures (peak_flops, hbm_bandwidth, hbm_capacity)",
			path, ErrInvalid, h.Name)
	}
	if err := h.Validate(); err != nil {
		return Hardware{}, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// decodeJSON decodes the one JSON object b (read from path) into v,
// strictly: unknown fields and trailing values are errors.
func decodeJSON(path string, b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: %w: the file is empty (want one JSON object)", path, ErrInvalid)
		}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("%s:%d: %w: %v", path, lineOf(b, se.Offset), ErrInvalid, err)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" { // the whole value: an array, a number, a string
				return fmt.Errorf("%s:%d: %w: the file holds a JSON %s (want one JSON object)", path, lineOf(b, te.Offset), ErrInvalid, te.Value)
			}
			return fmt.Errorf("%s:%d: %w: field %s: want a %s, got a JSON %s", path, lineOf(b, te.Offset), ErrInvalid, te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("%s: %w: %v", path, ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%s: %w: more than one JSON value (want one object)", path, ErrInvalid)
	}
	return nil
}

// lineOf is the 1-based line of byte offset off in b.
func lineOf(b []byte, off int64) int {
	off = min(max(off, 0), int64(len(b)))
	return 1 + bytes.Count(b[:off], []byte("\n"))
}
