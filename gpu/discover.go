package gpu

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/rankrun/rankrun/kvpool"
)

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Index    int
	Name     string
	UUID     string
	MemTotal uint64 // bytes
	MemFree  uint64 // bytes, at discovery time
}

// NVML is the part of the NVIDIA management library rankrun uses. Init must
// succeed before any other method; Shutdown ends a successful Init.
type NVML interface {
	Init() error
	Shutdown() error
	DeviceCount() (int, error)
	Device(i int) (DeviceInfo, error)
}

// Discovery is a snapshot of a node's GPUs and host memory.
type Discovery struct {
	Devices   []DeviceInfo
	Available bool   // at least one GPU was found and described
	Reason    string // why not, when !Available: "no NVIDIA GPU: ..."
	// HostMemAvailable is the host's MemAvailable in bytes (/proc/meminfo),
	// 0 when unknown; PlanPool checks host pools against it.
	HostMemAvailable int64
}

// Discover initialises n, lists its devices and shuts it down again; it also
// reads the host's available memory from /proc/meminfo. It never fails: a
// node without a usable GPU gives Available false and a Reason that starts
// "no NVIDIA GPU: " followed by NVML's error.
func Discover(n NVML) Discovery {
	d := discoverGPUs(n)
	if f, err := os.Open("/proc/meminfo"); err == nil {
		d.HostMemAvailable, _ = ParseMemAvailable(f) // unknown (0) on error
		_ = f.Close()
	}
	return d
}

func discoverGPUs(n NVML) Discovery {
	if err := n.Init(); err != nil {
		return Discovery{Reason: "no NVIDIA GPU: " + err.Error()}
	}
	// Shutdown errors are not actionable here: the snapshot is complete.
	defer func() { _ = n.Shutdown() }()
	count, err := n.DeviceCount()
	if err != nil {
		return Discovery{Reason: "no NVIDIA GPU: " + err.Error()}
	}
	if count == 0 {
		return Discovery{Reason: "no NVIDIA GPU: NVML reports 0 devices"}
	}
	d := Discovery{Available: true}
	for i := 0; i < count; i++ {
		info, err := n.Device(i)
		if err != nil {
			return Discovery{Reason: fmt.Sprintf("no NVIDIA GPU: %d devices, but: %v", count, err)}
		}
		d.Devices = append(d.Devices, info)
	}
	return d
}

// ParseMemAvailable reads the MemAvailable line of a /proc/meminfo listing
// and returns it in bytes.
func ParseMemAvailable(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%w: meminfo: malformed MemAvailable line %q", ErrInvalid, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > (1<<53) {
			return 0, fmt.Errorf("%w: meminfo: malformed MemAvailable line %q", ErrInvalid, sc.Text())
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%w: meminfo: %v", ErrInvalid, err)
	}
	return 0, fmt.Errorf("%w: meminfo: no MemAvailable line", ErrInvalid)
}

// BindRank returns the device of a rank from its local rank on the node:
// device localRank % len(d.Devices). It fails with ErrNoDevice when d has no
// devices and ErrInvalid for a negative local rank.
func BindRank(d Discovery, localRank int) (DeviceInfo, error) {
	if localRank < 0 {
		return DeviceInfo{}, fmt.Errorf("%w: localRank must not be negative (got %d)", ErrInvalid, localRank)
	}
	if !d.Available || len(d.Devices) == 0 {
		return DeviceInfo{}, fmt.Errorf("gpu: bind local rank %d: %w (%s)", localRank, ErrNoDevice, d.Reason)
	}
	return d.Devices[localRank%len(d.Devices)], nil
}

// PoolSource says where a pool's budget came from.
type PoolSource string

const (
	SourceGPU  PoolSource = "gpu"  // a fraction of the bound GPU's free memory
	SourceHost PoolSource = "host" // the configured host size
)

// PoolPlan is the sizing of one rank's pool.
type PoolPlan struct {
	Device *DeviceInfo // the bound GPU, nil for a host pool
	Source PoolSource
	Blocks int
	Bytes  int64 // Blocks * block size
	Reason string
}

// Config is the pool configuration for this plan.
func (p PoolPlan) Config(name string, blockBytes int) kvpool.PoolConfig {
	return kvpool.PoolConfig{Blocks: p.Blocks, BlockBytes: blockBytes, Name: name}
}

// PlanPool sizes a rank's pool. With a GPU it takes fraction of the free
// memory of the device bound to localRank (BindRank); without one it takes
// hostBytes, which must not exceed d.HostMemAvailable when that is known.
// Every argument is checked whatever the machine, so a configuration that
// passes on a GPU node also passes in CI: fraction in (0, 1], hostBytes and
// blockBytes positive, localRank not negative. The budget must hold at least
// one block; blocks are capped at math.MaxInt32. Errors wrap ErrInvalid and
// name the argument.
//
// rankrun keeps block bytes in host memory even when the budget comes from a
// GPU (it has no CUDA), so callers running several ranks per node should
// also bound the total by host memory.
func PlanPool(d Discovery, localRank int, fraction float64, hostBytes int64, blockBytes int) (PoolPlan, error) {
	switch {
	case !(fraction > 0 && fraction <= 1): // also rejects NaN
		return PoolPlan{}, fmt.Errorf("%w: fraction must be in (0, 1] (got %v)", ErrInvalid, fraction)
	case hostBytes <= 0:
		return PoolPlan{}, fmt.Errorf("%w: hostBytes must be positive (got %d)", ErrInvalid, hostBytes)
	case blockBytes <= 0:
		return PoolPlan{}, fmt.Errorf("%w: blockBytes must be positive (got %d)", ErrInvalid, blockBytes)
	case localRank < 0:
		return PoolPlan{}, fmt.Errorf("%w: localRank must not be negative (got %d)", ErrInvalid, localRank)
	}
	var plan PoolPlan
	var budget int64
	if d.Available && len(d.Devices) > 0 {
		dev, err := BindRank(d, localRank)
		if err != nil {
			return PoolPlan{}, err
		}
		plan.Device, plan.Source = &dev, SourceGPU
		budget = int64(fraction * float64(dev.MemFree))
		plan.Reason = fmt.Sprintf("%.3g of the %d free bytes of GPU %d (%s, %s)", fraction, dev.MemFree, dev.Index, dev.Name, dev.UUID)
	} else {
		if d.HostMemAvailable > 0 && hostBytes > d.HostMemAvailable {
			return PoolPlan{}, fmt.Errorf("%w: hostBytes %d exceeds the host's available memory (%d bytes)", ErrInvalid, hostBytes, d.HostMemAvailable)
		}
		plan.Source, budget = SourceHost, hostBytes
		plan.Reason = fmt.Sprintf("host pool of %d bytes (%s)", hostBytes, d.Reason)
	}
	if int64(blockBytes) > budget {
		return PoolPlan{}, fmt.Errorf("%w: blockBytes %d exceeds the %s budget of %d bytes", ErrInvalid, blockBytes, plan.Source, budget)
	}
	blocks := min(budget/int64(blockBytes), int64(1<<31-1), kvpool.MaxPoolBytes/int64(blockBytes))
	plan.Blocks, plan.Bytes = int(blocks), blocks*int64(blockBytes)
	return plan, nil
}
