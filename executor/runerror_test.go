package executor

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
)

// A run that ended on a collective timeout names, as world ranks, the rank
// whose error it is and the ranks that never arrived; apart from them the
// ranks those wait on in point-to-point (where to look next).
func TestRunErrorNamesTheMissingAndWhatTheyWaitOn(t *testing.T) {
	te := &comm.TimeoutError{Group: "world/s1c2/s1c0", Self: 0, WorldRanks: []int{4, 5, 6, 7}, Missing: []int{1},
		Waiting: comm.Entry{Kind: flight.KindAllgather, Seq: 2},
		Peers:   []comm.PeerRecords{{Rank: 1, Records: []flight.OpRecord{{Group: "world", Kind: flight.KindSend, Peer: 0, Start: time.Unix(1, 0)}}}}}
	re := NewRunError(fmt.Errorf("rank 4: %w", te), []int{4})
	require.Equal(t, "collective-timeout", re.Kind)
	require.Equal(t, []int{4, 5}, re.Ranks, "the rank that timed out and the one that never arrived, as world ranks")
	require.Equal(t, []int{0}, re.WaitedOn, "world rank 0, which the missing rank waits on")
}
