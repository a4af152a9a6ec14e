package executor

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/request"
)

// explain gives a relayed reason the cause that ended the request as it
// ended (the CTX and GEN groups agree on a transfer apart, so a CTX rank's
// cause may be for another outcome), the first in world-rank order; with
// none of that state it takes the first of any; a reason the leader found
// itself, and one no rank explains, stay as they are.
func TestExplainPrefersTheCauseOfTheOutcome(t *testing.T) {
	causes := []NotCompleted{
		{ID: 2, State: request.Failed, Reason: "ctx rank 0 (world rank 0) found: a"},
		{ID: 2, State: request.Cancelled, Reason: "gen rank 1 (world rank 2) found: b"},
		{ID: 2, State: request.Cancelled, Reason: "gen rank 2 (world rank 3) found: c"},
		{ID: 3, State: request.Cancelled, Reason: "ctx rank 0 (world rank 0) found: d"},
	}
	notes := []NotCompleted{
		{ID: 2, State: request.Cancelled, Reason: "cancelled on another rank of the group", Relayed: true},
		{ID: 3, State: request.Failed, Reason: "failed on another rank of the group", Relayed: true},
		{ID: 4, State: request.Failed, Reason: "gen rank 0 (world rank 1) found: e"},
		{ID: 5, State: request.Failed, Reason: "ctx rank 0 cancelled", Relayed: true},
	}
	explain(notes, causes)
	require.Equal(t, []NotCompleted{
		{ID: 2, State: request.Cancelled, Reason: "gen rank 1 (world rank 2) found: b"},
		{ID: 3, State: request.Failed, Reason: "ctx rank 0 (world rank 0) found: d"},
		{ID: 4, State: request.Failed, Reason: "gen rank 0 (world rank 1) found: e"},
		{ID: 5, State: request.Failed, Reason: "ctx rank 0 cancelled", Relayed: true},
	}, notes)
}
