package launch

import (
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
)

// A rank that returned waits in Finalize past its peers' collective bound
// and their stall inspector (comm.InspectTimeout), so that their timeout,
// naming it as returned, ends the job first, whatever the bound.
func TestFinalizeOutwaitsTheCollectiveBound(t *testing.T) {
	for _, bound := range []time.Duration{0, time.Second, 30 * time.Second, time.Minute, 10 * time.Minute} {
		eff := bound
		if eff == 0 {
			eff = comm.DefaultCollectiveTimeout
		}
		if got := finalizeBound(bound); got < eff+comm.InspectTimeout+5*time.Second || got < time.Minute {
			t.Errorf("collective bound %v: Finalize waits %v, want past the bound and the inspector, and at least a minute", bound, got)
		}
	}
}
