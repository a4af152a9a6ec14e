package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/rankrun/rankrun/gpu"
	"github.com/rankrun/rankrun/internal/units"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/runspec"
	"github.com/rankrun/rankrun/topology"
)

const devicesExamples = `  rankrun devices                                   # GPUs, and the pool of each rank of --layout tp=1
  rankrun devices --layout tp=4 --fraction 0.5      # 4 local ranks, half the free memory of each bound GPU
  rankrun devices --layout tp=2,pp=2 --ranks-per-node 8 --host-bytes 2GiB --json
`

// devicesReport is the JSON form of rankrun devices. Field names are stable.
type devicesReport struct {
	NVMLAvailable    bool          `json:"nvml_available"`
	Reason           string        `json:"reason,omitempty"`
	Devices          []deviceJSON  `json:"devices"`
	HostMemAvailable int64         `json:"host_mem_available_bytes"`
	Layout           string        `json:"layout"`
	Fraction         float64       `json:"fraction"`
	HostBytes        int64         `json:"host_bytes"`
	Ranks            []rankPlanRow `json:"ranks"`
	TotalPoolBytes   int64         `json:"total_pool_bytes"`
	Warnings         []string      `json:"warnings"`
}

type deviceJSON struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	UUID     string `json:"uuid"`
	MemTotal uint64 `json:"memory_total_bytes"`
	MemFree  uint64 `json:"memory_free_bytes"`
}

type rankPlanRow struct {
	LocalRank    int    `json:"local_rank"`
	InstanceRank int    `json:"instance_rank"` // rank of --layout whose shard sizes the blocks
	Device       *int   `json:"device"`        // bound GPU index; null for a host pool
	DeviceUUID   string `json:"device_uuid,omitempty"`
	Source       string `json:"source"` // gpu | host
	BlockBytes   int    `json:"block_bytes"`
	Blocks       int    `json:"blocks"`
	PoolBytes    int64  `json:"pool_bytes"`
	Reason       string `json:"reason"`
}

// devicesCmd lists the node's GPUs through the real NVML when this binary
// was built with the nvml tag (make build's bin/rankrun is); a plain go
// build compiles no C, and its NVML says how to rebuild (gpu.NewNVML).
func devicesCmd(args []string, stdout, stderr io.Writer) error {
	return devices(args, gpu.NewNVML(), stdout, stderr)
}

// devices is devicesCmd over a given NVML (tests pass a fake).
func devices(args []string, lib gpu.NVML, stdout, stderr io.Writer) error {
	fs := newFlagSet("devices", "The GPUs NVML sees (or why none), the device each local rank binds to (local rank mod\n"+
		"device count) and the KV pool it would get: --fraction of the bound GPU's free memory, or --host-bytes\n"+
		"of host memory without a GPU. Blocks are sized by the shard of --layout and the model flags;\n"+
		"local rank i holds instance rank i mod the layout's ranks.", devicesExamples, stderr)
	def := topology.DefaultModel()
	layoutSpec := fs.String("layout", "tp=1", "layout of the ranks on this node: tp=N,pp=N,cp=N,dp=N,ep=N[,adp]")
	var m topology.Model
	fs.IntVar(&m.Layers, "layers", def.Layers, "model: transformer layers (>= 1, at most 65536)")
	fs.IntVar(&m.KVHeads, "kv-heads", def.KVHeads, "model: KV heads per layer (>= 1, at most 65536)")
	fs.IntVar(&m.HeadDim, "head-dim", def.HeadDim, "model: elements per head per token (>= 1, at most 65536)")
	fs.IntVar(&m.TokensPerBlock, "tokens-per-block", def.TokensPerBlock, "model: tokens per KV block (>= 1, at most 65536)")
	fs.IntVar(&m.ElemBytes, "elem-bytes", def.ElemBytes, "model: bytes per element (>= 1, at most 65536)")
	perNode := fs.Int("ranks-per-node", 0, "local ranks on this node (0: the ranks of --layout)")
	fraction := fs.Float64("fraction", 0.9, "share of a GPU's free memory for its rank's KV pool, in (0, 1]")
	hostSpec := fs.String("host-bytes", "1GiB", "KV pool size per rank without a GPU (bytes; suffixes KiB, MiB, GiB, TiB, kB, MB, GB)")
	jsonOut := fs.Bool("json", false, "print the view as JSON on stdout (stable field names)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	layout, err := topology.ParseLayout(*layoutSpec)
	if err != nil {
		return usagef("--layout: %v", err)
	}
	if err := runspec.CheckModelFlags(m); err != nil {
		return err
	}
	if err := layout.ValidateFor(m); err != nil {
		return usagef("--layout %s: %v", layout, err)
	}
	if !(*fraction > 0 && *fraction <= 1) {
		return usagef("--fraction %v: must be in (0, 1]", *fraction)
	}
	hostBytes, err := units.ParseBytes(*hostSpec, kvpool.MaxPoolBytes)
	if err != nil {
		return usagef("--host-bytes %q: %v", *hostSpec, err)
	}
	n := *perNode
	if n < 0 || n > 4096 {
		return usagef("--ranks-per-node %d: must be in 1..4096 (0: the ranks of --layout)", *perNode)
	}
	if n == 0 {
		if n = layout.Ranks(); n > 4096 {
			return usagef("--layout %s: %d ranks, more than a node's 4096 (give --ranks-per-node for this node's share)", layout, n)
		}
	}

	d := gpu.Discover(lib)
	rep := devicesReport{NVMLAvailable: d.Available, Reason: d.Reason, Devices: []deviceJSON{}, HostMemAvailable: d.HostMemAvailable,
		Layout: layout.String(), Fraction: *fraction, HostBytes: hostBytes, Ranks: []rankPlanRow{}, Warnings: []string{}}
	for _, dev := range d.Devices {
		rep.Devices = append(rep.Devices, deviceJSON{Index: dev.Index, Name: dev.Name, UUID: dev.UUID, MemTotal: dev.MemTotal, MemFree: dev.MemFree})
	}
	plan, err := gpu.PlanNode(d, layout, m, n, *fraction, hostBytes)
	var pe *gpu.PlanError
	switch {
	case errors.As(err, &pe) && pe.Shard:
		return usagef("--layout %s: rank %d: %v", layout, pe.InstanceRank, pe.Err)
	case errors.As(err, &pe):
		flagName := "--host-bytes"
		if d.Available {
			flagName = "--fraction"
		}
		return usagef("local rank %d (%s): %v", pe.LocalRank, flagName, pe.Err)
	case err != nil:
		return err
	}
	for _, p := range plan.Ranks {
		row := rankPlanRow{LocalRank: p.LocalRank, InstanceRank: p.InstanceRank, Source: string(p.Source), BlockBytes: p.BlockBytes,
			Blocks: p.Blocks, PoolBytes: p.Bytes, Reason: p.Reason}
		if p.Device != nil {
			idx := p.Device.Index
			row.Device, row.DeviceUUID = &idx, p.Device.UUID
		}
		rep.Ranks = append(rep.Ranks, row)
	}
	rep.TotalPoolBytes, rep.Warnings = plan.TotalPoolBytes, plan.Warnings
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeDevicesText(stdout, &rep)
	return nil
}

func writeDevicesText(w io.Writer, rep *devicesReport) {
	if rep.NVMLAvailable {
		fmt.Fprintf(w, "NVML: %d GPU(s)\n", len(rep.Devices))
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GPU\tNAME\tUUID\tMEMORY TOTAL\tMEMORY FREE")
		for _, d := range rep.Devices {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", d.Index, d.Name, d.UUID, units.Bytes(int64(d.MemTotal)), units.Bytes(int64(d.MemFree)))
		}
		_ = tw.Flush()
	} else {
		fmt.Fprintf(w, "%s\n", rep.Reason)
		host := "unknown"
		if rep.HostMemAvailable > 0 {
			host = units.Bytes(rep.HostMemAvailable)
		}
		fmt.Fprintf(w, "KV pools fall back to host memory: %s per rank (--host-bytes); host memory available: %s\n", units.Bytes(rep.HostBytes), host)
	}
	fmt.Fprintf(w, "\n%d local ranks of layout %s:\n", len(rep.Ranks), rep.Layout)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCAL RANK\tLAYOUT RANK\tDEVICE\tSOURCE\tBLOCK BYTES\tBLOCKS\tPOOL")
	for _, r := range rep.Ranks {
		dev := "host"
		if r.Device != nil {
			dev = fmt.Sprintf("GPU %d", *r.Device)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%d\t%s\n", r.LocalRank, r.InstanceRank, dev, r.Source, r.BlockBytes, r.Blocks, units.Bytes(r.PoolBytes))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "total pool bytes: %s\n", units.Bytes(rep.TotalPoolBytes))
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}
