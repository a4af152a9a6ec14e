// Package args checks the point-to-point arguments every backend of comm
// takes alike, so that a bad one gets the same error from each.
package args

import (
	"fmt"

	"github.com/rankrun/rankrun/comm"
)

// Check validates the arguments every backend's Isend and Irecv share:
// peer within the group (or comm.AnySource where wildcard), tag within
// 0..comm.MaxTag (or comm.AnyTag where wildcard), the error wrapping
// comm.ErrBadArgument and naming op.
func Check(c comm.Comm, op string, peer, tag int, wildcard bool) error {
	if wildcard && peer == comm.AnySource {
	} else if peer < 0 || peer >= c.Size() {
		return fmt.Errorf("%w: %s: peer rank %d outside 0..%d", comm.ErrBadArgument, op, peer, c.Size()-1)
	}
	if wildcard && tag == comm.AnyTag {
		return nil
	}
	if tag < 0 || tag > comm.MaxTag {
		return fmt.Errorf("%w: %s: tag %d outside 0..%d", comm.ErrBadArgument, op, tag, comm.MaxTag)
	}
	return nil
}
