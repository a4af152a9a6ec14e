package kvpool

import "errors"

var (
	// ErrInvalid is wrapped by configuration and argument errors; the message
	// names the field and the rule.
	ErrInvalid = errors.New("kvpool: invalid argument")
	// ErrPoolFull: TryAllocate found too few free blocks (or earlier waiters
	// queued ahead of it).
	ErrPoolFull = errors.New("kvpool: pool full")
	// ErrTooLarge: the request asks for more blocks than the whole pool has;
	// it could never be satisfied.
	ErrTooLarge = errors.New("kvpool: request larger than the pool")
	// ErrDuplicate: the request already holds blocks or is already waiting.
	ErrDuplicate = errors.New("kvpool: request already allocated")
	// ErrNotAllocated: the request holds no blocks (released twice, or never
	// allocated).
	ErrNotAllocated = errors.New("kvpool: request not allocated")
	// ErrPinned: Release while leases on the request are still open.
	ErrPinned = errors.New("kvpool: request blocks pinned by open leases")
	// ErrUnknownLease: EndLease of a lease that is not open (ended twice, or
	// never granted).
	ErrUnknownLease = errors.New("kvpool: unknown lease")
	// ErrInvariant is wrapped by CheckInvariants failures.
	ErrInvariant = errors.New("kvpool: pool invariant broken")
)
