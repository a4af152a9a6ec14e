//go:build !nvml

package gpu

import "fmt"

// Built reports whether this binary carries the real NVML (the nvml tag).
const Built = false

// NewNVML returns, in a binary built without the nvml tag, an NVML whose
// Init fails with ErrNVML naming the rebuild, so Discover reports no GPU
// and why. The default build stays pure Go: go-nvml's header needs cgo,
// and compiling it prints its deprecation warnings.
func NewNVML() NVML { return noNVML{} }

type noNVML struct{}

func (noNVML) Init() error {
	return fmt.Errorf("%w: init: this binary was built without NVML (rebuild with -tags nvml; make build does)", ErrNVML)
}

func (noNVML) Shutdown() error {
	return fmt.Errorf("%w: shutdown: not initialised", ErrNVML)
}

func (noNVML) DeviceCount() (int, error) {
	return 0, fmt.Errorf("%w: device count: not initialised", ErrNVML)
}

func (noNVML) Device(i int) (DeviceInfo, error) {
	return DeviceInfo{}, fmt.Errorf("%w: device %d: not initialised", ErrNVML, i)
}
