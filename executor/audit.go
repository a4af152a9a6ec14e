package executor

import (
	"context"
	"fmt"

	"github.com/rankrun/rankrun/comm"
)

// auditAgreed checks, in checked mode, that a decision which chooses the
// next collective (busy: decode or wait) is the same on every rank of the
// executor group: one allreduce of (v, -v) by min gives the minimum and the
// maximum at once. A divergence is reported at the iteration it happens, as
// a desync naming the ranks on each side, before it can pair mismatched
// collectives. The condition (checked mode, group size) is configuration,
// so every rank of the group enters the audit or none does.
func (l *loop) auditAgreed(ctx context.Context, what string, v bool) error {
	if !l.audit || l.g.exec.Size() < 2 {
		return nil
	}
	x := int64(0)
	if v {
		x = 1
	}
	l.auditBuf = [2]int64{x, -x}
	if err := l.g.exec.AllreduceInt64(ctx, comm.Min, l.auditBuf[:], l.auditBuf[:]); err != nil {
		return fmt.Errorf("executor: agreement audit of %s: %w", what, err)
	}
	if l.auditBuf[0] == -l.auditBuf[1] {
		return nil
	}
	// Every rank saw the same min and max, so every rank gathers.
	var who comm.Gathered
	if err := l.g.exec.AllgatherInt64s(ctx, []int64{x}, &who); err != nil {
		return fmt.Errorf("executor: agreement audit of %s: %w", what, err)
	}
	var yes, no []int
	for r := range l.g.exec.Size() {
		if who.Of(r)[0] == 1 {
			yes = append(yes, r)
		} else {
			no = append(no, r)
		}
	}
	return fmt.Errorf("%w: executor group %q iteration %d: %s diverged: group ranks %v %s, group ranks %v not (a rank-local fact would choose the next collective)",
		comm.ErrDesync, l.g.exec.Name(), l.rep.Iterations, what, yes, what, no)
}
