package benchtab

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: a timed child
// process is waited for.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
