//go:build nvml

package gpu

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Built reports whether this binary carries the real NVML (the nvml tag).
const Built = true

// NewNVML returns the real NVML, over github.com/NVIDIA/go-nvml. It calls no
// NVML function other than Init unless Init returned success: after a failed
// Init (no driver) the other methods return an error wrapping ErrNVML without
// touching the library (calling into it would kill the process).
func NewNVML() NVML { return &realNVML{lib: nvml.New()} }

type realNVML struct {
	lib nvml.Interface

	mu     sync.Mutex
	inited bool
}

func (r *realNVML) Init() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inited {
		return fmt.Errorf("%w: init: already initialised", ErrNVML)
	}
	if ret := r.lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("%w: init: %s", ErrNVML, nvml.ErrorString(ret))
	}
	r.inited = true
	return nil
}

func (r *realNVML) Shutdown() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.inited {
		return fmt.Errorf("%w: shutdown: not initialised", ErrNVML)
	}
	r.inited = false
	if ret := r.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("%w: shutdown: %s", ErrNVML, nvml.ErrorString(ret))
	}
	return nil
}

func (r *realNVML) DeviceCount() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.inited {
		return 0, fmt.Errorf("%w: device count: not initialised", ErrNVML)
	}
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("%w: device count: %s", ErrNVML, nvml.ErrorString(ret))
	}
	return n, nil
}

func (r *realNVML) Device(i int) (DeviceInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.inited {
		return DeviceInfo{}, fmt.Errorf("%w: device %d: not initialised", ErrNVML, i)
	}
	if i < 0 {
		return DeviceInfo{}, fmt.Errorf("%w: device %d: index must not be negative", ErrNVML, i)
	}
	d, ret := r.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return DeviceInfo{}, fmt.Errorf("%w: device %d: handle: %s", ErrNVML, i, nvml.ErrorString(ret))
	}
	info := DeviceInfo{Index: i}
	if info.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return DeviceInfo{}, fmt.Errorf("%w: device %d: name: %s", ErrNVML, i, nvml.ErrorString(ret))
	}
	if info.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return DeviceInfo{}, fmt.Errorf("%w: device %d: uuid: %s", ErrNVML, i, nvml.ErrorString(ret))
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return DeviceInfo{}, fmt.Errorf("%w: device %d: memory info: %s", ErrNVML, i, nvml.ErrorString(ret))
	}
	info.MemTotal, info.MemFree = mem.Total, mem.Free
	return info, nil
}
