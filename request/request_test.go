package request

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatus(t *testing.T) {
	require.Equal(t, Cancelled, Worse(Failed, Cancelled))
	require.Equal(t, Failed, Worse(Failed, Completed))
	require.Equal(t, Completed, Worse(Pending, Completed))
	require.False(t, Pending.Terminal())
	require.True(t, Cancelled.Terminal())
	for _, s := range []Status{Pending, Completed, Failed, Cancelled} {
		b, err := json.Marshal(s)
		require.NoError(t, err)
		var back Status
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, s, back, "%s", b)
	}
	var bad Status
	require.ErrorContains(t, json.Unmarshal([]byte(`"done"`), &bad), "unknown status")
	_, err := Status(9).MarshalText()
	require.Error(t, err)
	require.Equal(t, "req-7", ID(7).String())
}
