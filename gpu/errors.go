package gpu

import "errors"

var (
	// ErrInvalid is wrapped by configuration and argument errors; the message
	// names the field and the rule.
	ErrInvalid = errors.New("gpu: invalid argument")
	// ErrPoolFull: TryAllocate found too few free blocks (or earlier waiters
	// queued ahead of it).
	ErrPoolFull = errors.New("gpu: pool full")
	// ErrTooLarge: the request asks for more blocks than the whole pool has;
	// it could never be satisfied.
	ErrTooLarge = errors.New("gpu: request larger than the pool")
	// ErrDuplicate: the request already holds blocks or is already waiting.
	ErrDuplicate = errors.New("gpu: request already allocated")
	// ErrNotAllocated: the request holds no blocks (released twice, or never
	// allocated).
	ErrNotAllocated = errors.New("gpu: request not allocated")
	// ErrPinned: Release while leases on the request are still open.
	ErrPinned = errors.New("gpu: request blocks pinned by open leases")
	// ErrUnknownLease: EndLease of a lease that is not open (ended twice, or
	// never granted).
	ErrUnknownLease = errors.New("gpu: unknown lease")
	// ErrInvariant is wrapped by CheckInvariants failures.
	ErrInvariant = errors.New("gpu: pool invariant broken")
	// ErrNoDevice: BindRank with no GPU discovered.
	ErrNoDevice = errors.New("gpu: no GPU device")
	// ErrNVML is wrapped by errors from the real NVML implementation.
	ErrNVML = errors.New("gpu: nvml")
)
