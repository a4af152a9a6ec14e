package executor

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDecideIdleCoversTheDesignTable checks every row of DESIGN.md §6.
func TestDecideIdleCoversTheDesignTable(t *testing.T) {
	for _, tc := range []struct {
		name        string
		in          IdleInput
		check       bool
		collectives bool
	}{
		{"async 1 rank, in flight", IdleInput{Sync: false, GroupRanks: 1, SendInFlight: true}, true, false},
		{"async 1 rank, idle", IdleInput{Sync: false, GroupRanks: 1}, true, false},
		{"async 4 ranks, in flight", IdleInput{Sync: false, GroupRanks: 4, SendInFlight: true}, true, true},
		{"async 2 ranks, idle", IdleInput{Sync: false, GroupRanks: 2}, true, true},
		{"sync 1 rank, in flight (seed 001 reap)", IdleInput{Sync: true, GroupRanks: 1, SendInFlight: true}, true, false},
		{"sync 1 rank, nothing", IdleInput{Sync: true, GroupRanks: 1}, false, false},
		{"sync 2 ranks, in flight (guard)", IdleInput{Sync: true, GroupRanks: 2, SendInFlight: true}, false, false},
		{"sync 8 ranks, nothing (guard)", IdleInput{Sync: true, GroupRanks: 8}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := DecideIdle(tc.in)
			assert.Equal(t, tc.check, a.Check, a.String())
			assert.Equal(t, tc.collectives, a.Collectives, a.String())
			assert.Equal(t, 0, a.AtLeast, "idle checks never wait locally")
			assert.NotEmpty(t, a.Row)
			// The one rule: a multi-rank action that enters collectives
			// must not depend on rank-local state. Flipping the rank-local
			// input must not change whether collectives are entered.
			flipped := tc.in
			flipped.SendInFlight = !flipped.SendInFlight
			if tc.in.GroupRanks > 1 {
				assert.Equal(t, a.Collectives, DecideIdle(flipped).Collectives, "collectives chosen from rank-local state")
				assert.Equal(t, a.Check, DecideIdle(flipped).Check, "multi-rank check chosen from rank-local state")
			}
		})
	}
}
