package executor

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rankrun/rankrun/transceiver"
)

func TestOutcomeTally(t *testing.T) {
	tl := newOutcomeTally(3)
	_, ok := tl.add(7, transceiver.StateTransferred)
	assert.False(t, ok, "one of three holders reported")
	_, ok = tl.add(7, transceiver.StateFailed)
	assert.False(t, ok)
	st, ok := tl.add(7, transceiver.StateTransferred)
	assert.True(t, ok, "all three reported")
	assert.Equal(t, transceiver.StateFailed, st, "failed beats transferred")
	assert.Empty(t, tl.pending)

	tl.add(8, transceiver.StateCancelled)
	tl.add(8, transceiver.StateFailed)
	st, _ = tl.add(8, transceiver.StateTransferred)
	assert.Equal(t, transceiver.StateCancelled, st, "cancelled beats failed")

	one := newOutcomeTally(1)
	st, ok = one.add(9, transceiver.StateTransferred)
	assert.True(t, ok)
	assert.Equal(t, transceiver.StateTransferred, st)
}
