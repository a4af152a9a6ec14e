package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// subprocessEnv makes the test binary run as rankrun itself (see
// TestMain): the signal and stdout tests run the real command in a real
// process.
const subprocessEnv = "RANKRUN_TEST_AS_CLI"

// TestMain checks that no test of the CLI leaves a goroutine behind: every
// in-process run must end all of its ranks.
func TestMain(m *testing.M) {
	if os.Getenv(subprocessEnv) == "1" {
		os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
