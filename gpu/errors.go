package gpu

import "errors"

var (
	// ErrInvalid is wrapped by configuration and argument errors; the message
	// names the field and the rule.
	ErrInvalid = errors.New("gpu: invalid argument")
	// ErrNoDevice: BindRank with no GPU discovered.
	ErrNoDevice = errors.New("gpu: no GPU device")
	// ErrNVML is wrapped by errors from the NVML implementation, and by
	// every call of the one in a binary built without the nvml tag.
	ErrNVML = errors.New("gpu: nvml")
)
