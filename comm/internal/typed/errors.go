package typed

import "errors"

// The errors a typed collective's checks return; comm exports them (as
// comm.ErrDesync and comm.ErrBadArgument), its backends return them.
var (
	// ErrDesync: ranks of one group entered different collectives (or the
	// same one with arguments that do not pair up).
	ErrDesync = errors.New("comm: collective desync")
	// ErrBadArgument: a caller error (negative rank or tag, nil buffer,
	// a count that does not fit its buffer, ...).
	ErrBadArgument = errors.New("comm: bad argument")
)
