package executor

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rankrun/rankrun/request"
)

func TestOutcomeTally(t *testing.T) {
	tl := newOutcomeTally(3)
	_, ok := tl.add(7, request.Completed)
	assert.False(t, ok, "one of three holders reported")
	_, ok = tl.add(7, request.Failed)
	assert.False(t, ok)
	st, ok := tl.add(7, request.Completed)
	assert.True(t, ok, "all three reported")
	assert.Equal(t, request.Failed, st, "failed beats completed")
	assert.Empty(t, tl.pending)

	tl.add(8, request.Cancelled)
	tl.add(8, request.Failed)
	st, _ = tl.add(8, request.Completed)
	assert.Equal(t, request.Cancelled, st, "cancelled beats failed")

	one := newOutcomeTally(1)
	st, ok = one.add(9, request.Completed)
	assert.True(t, ok)
	assert.Equal(t, request.Completed, st)
}

// A run that ended on an error with requests unfinished held its blocks:
// in use, not leaked. One whose every request finished (the error came at
// the end) leaked what it still holds.
func TestCutShortOnlyWhenRequestsUnfinished(t *testing.T) {
	mk := func(completed, failed int) *Report {
		r := &Report{RequestsCompleted: completed, RequestsFailed: failed, LeakedBlocks: 16, PinnedBlocksAtEnd: 16}
		r.Errors = []string{r.leakLine(), "the run's error"}
		return r
	}
	r := mk(2, 0)
	r.cutShort(24)
	assert.Equal(t, 0, r.LeakedBlocks)
	assert.Equal(t, 16, r.InUseAtEnd)
	assert.Equal(t, []string{"the run's error"}, r.Errors)

	r = mk(23, 1)
	r.cutShort(24)
	assert.Equal(t, 16, r.LeakedBlocks, "every request finished: the blocks outlived them")
	assert.Zero(t, r.InUseAtEnd)
	assert.Len(t, r.Errors, 2)
}
