package sweep

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: Run's workers
// and every run they start must end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
