// Package exploretest runs explore's schedule search from a Go test, as
// httptest serves HTTP from one: Program fails the test with the first
// failing schedule and the one go test line that replays it, and that line's
// flags (-rankrun.seed, -rankrun.strategy, -rankrun.ranks), registered when
// a test binary imports this package, make Program run only that schedule.
// The product (cmd/rankrun, package explore) imports neither testing nor
// these flags.
package exploretest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/explore"
)

// The flags a failure's replay line sets (go test ... -rankrun.seed=N):
// with -rankrun.seed, Program runs that one schedule.
var (
	replaySeed     = flag.Uint64("rankrun.seed", 0, "exploretest.Program: run only this schedule seed (from a failure's replay line)")
	replayStrategy = flag.String("rankrun.strategy", "random", "exploretest.Program: the replayed schedule's strategy (random or pct)")
	replayRanks    = flag.Int("rankrun.ranks", 0, "exploretest.Program: the replayed schedule's world size (0: the test's)")
)

// Program runs fn on n simulated ranks under many schedules (see
// explore.SearchProgram) and fails t with the first failing schedule's errors and
// the one command that replays exactly that schedule; run by that command
// (-rankrun.seed), it runs that schedule only. It is the way a test asks
// "does my program deadlock or desync under any schedule?".
func Program(t testing.TB, n int, fn func(ctx context.Context, c comm.Comm) error, o explore.ProgramOptions) explore.ProgramResult {
	t.Helper()
	if *replaySeed != 0 {
		st, err := sim.ParseStrategy(*replayStrategy)
		if err != nil {
			t.Fatal(err)
		}
		// Exactly that schedule: no other seeds, no shrinking.
		o.Seeds, o.Start, o.Strategy, o.Budget, o.MinRanks = 1, *replaySeed, &st, 0, 0
		if *replayRanks > 0 {
			n = *replayRanks
		}
	}
	res := explore.SearchProgram(context.Background(), n, fn, o)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if f := res.Smallest; f != nil {
		msg := f.Error()
		if res.First != res.Smallest {
			msg = fmt.Sprintf("%s\n  (first found on %d ranks at seed %d)", msg, res.First.Ranks, res.First.Seed)
		}
		t.Fatalf("exploretest.Program: %s\n  replay: %s", msg, replayCommand(t, f, o.ReplayArgs))
	}
	return res
}

// replayCommand is the go test line that replays f in t's package.
func replayCommand(t testing.TB, f *explore.ProgramFailure, extra string) string {
	pkg := "."
	if wd, err := os.Getwd(); err == nil {
		if root := moduleRoot(wd); root != "" {
			if rel, err := filepath.Rel(root, wd); err == nil && rel != "." {
				pkg = "./" + filepath.ToSlash(rel)
			}
		}
	}
	// Every level of the test's name, anchored: only this (sub)test runs
	// with the forced schedule.
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	line := fmt.Sprintf("go test -run '%s' %s -rankrun.seed=%d -rankrun.strategy=%s -rankrun.ranks=%d", strings.Join(parts, "/"), pkg, f.Seed, f.Strategy, f.Ranks)
	if extra != "" {
		line += " " + extra
	}
	return line
}

// moduleRoot is the directory of the go.mod above dir ("" when none).
func moduleRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}
