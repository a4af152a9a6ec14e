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
