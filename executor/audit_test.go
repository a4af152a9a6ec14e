package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
)

// The agreement audit: a decision that chooses the next collective and
// differs between the ranks of an executor group is a desync naming the
// ranks on each side; one that agrees passes, on every rank.
func TestAuditNamesTheRanksOnEachSide(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	busy := []bool{true, false, true, true}
	errs := local.RunAll(ctx, len(busy), local.Config{}, func(ctx context.Context, c comm.Comm) error {
		l := &loop{audit: true, g: groups{exec: c}}
		l.rep.Iterations = 7
		if err := l.auditAgreed(ctx, "busy", true); err != nil {
			return errors.New("an agreed value failed the audit: " + err.Error())
		}
		return l.auditAgreed(ctx, "busy", busy[c.Rank()])
	})
	for r, err := range errs {
		require.ErrorIs(t, err, comm.ErrDesync, "rank %d", r)
		require.ErrorContains(t, err, "iteration 7: busy diverged: group ranks [0 2 3] busy, group ranks [1] not", "rank %d", r)
	}
}
