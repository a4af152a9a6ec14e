package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test of the CLI leaves a goroutine behind: every
// in-process run must end all of its ranks.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
