//go:build mpirun

package mpicli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The multi-rank regression scenarios (tests/multirank/testdata/*.txt)
// under real mpirun, one rank per process. The checker is the Go one:
// every rank runs `rankrun-mpi scenario [--replay-on] FILE`, world rank 0
// judges the report, and a rank that fails judges its own error before it
// ends the job; each prints one "scenario: PASS|FAIL ..." line (package
// scenario's VerdictLine, the same text as in-process).
//
// Cases whose expectations bound timing figures from above are refused by
// the scenario command under mpirun (the operating system's wake-ups set
// them there); they run in-process and in simulation (make test), and are
// not listed here.
//
// Environment (for scripts/test-multinode.sh and for debugging):
//   - MPIRUN: the mpirun command these jobs use (default mpirun); the
//     multinode test passes a wrapper that runs them across network
//     namespaces as hosts. Only the scenario and exit-fault tests use it.
//   - MPI_ADP=0 skips TestMpirunScenariosADP.
//   - KILL_BOUND: seconds TestMpirunExitFaultEndsTheJob's job may take (30).
//
// go test -run selects cases: -run 'TestMpirunScenarios$/fault-exit-gen$'.

// scenarioCases are the hand-written cases: FILE (as written) or
// FILE+replay (with its replay-under-test on), FILE under
// tests/multirank/testdata without .txt.
var scenarioCases = []string{
	"divergent-gen-tp8", "divergent-duplicated-heads", "replay-no-idle-reap", "replay-unsafe-idle-reap",
	"fault-fail-transfer", "fault-fail-transfer-sync", "fault-cancel-ctx", "fault-cancel-gen", "fault-corrupt",
	"fault-corrupt-first-byte-world0", "fault-corrupt-last-byte",
	"fault-delay", "fault-timeout-transfer", "fault-sync-receive-outlasts-bound", "fault-drop-ack", "fault-delay-ack", "fault-delay-ack-past-deadline",
	"fault-fail-send-before", "fault-fail-send-during", "fault-fail-send-after", "replay-local-error-collective",
	"fault-exit-ctx", "fault-exit-gen", "fault-stall-long", "fault-stall-long-ctx", "fault-stall-long-gen-leader", "replay-fill-gate-gather+replay",
	"replay-no-idle-reap+replay", "replay-unsafe-idle-reap+replay", "replay-local-error-collective+replay",
	"replay-local-admission-gate+replay", "trace-mooncake-window",
}

// launcher is the mpirun command of the scenario and exit-fault jobs.
func launcher() string {
	if m := os.Getenv("MPIRUN"); m != "" {
		return m
	}
	return "mpirun"
}

// envInt is the integer in environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s=%q: want an integer", name, v)
	return n
}

// privateCopy copies bin/rankrun-mpi into dir, so that a rank process left
// behind after its mpirun returned can be found by its executable, and
// registers a cleanup that wakes and kills any such process.
func privateCopy(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(mpiBin)
	require.NoError(t, err)
	p := filepath.Join(dir, "rankrun-mpi")
	require.NoError(t, os.WriteFile(p, b, 0o755))
	t.Cleanup(func() { contKill(processesOf(p)) })
	return p
}

// rankJob runs bin args on np ranks through launcher(), bounded as runJob
// bounds a job, with each rank's stdout in a file of its own (mpirun
// forwarding rank output through its pty stalls under CPU contention);
// the job's stdout is then the ranks' outputs in world-rank order.
func rankJob(t *testing.T, dir string, np int, bin string, args ...string) job {
	t.Helper()
	out := filepath.Join(dir, "out")
	old, _ := filepath.Glob(out + ".rank.*")
	for _, f := range old {
		require.NoError(t, os.Remove(f))
	}
	j := runJob(t, launcher(), mpirunArgs(append([]string{"-np", strconv.Itoa(np),
		"bash", "-c", `exec "$@" >"$0.rank.$OMPI_COMM_WORLD_RANK"`, out, bin}, args...)...)...)
	if j.stdout != "" { // mpirun's own: the ranks write theirs to files
		j.stderr = "--- mpirun's stdout\n" + j.stdout + "--- mpirun's stderr\n" + j.stderr
	}
	var sb strings.Builder
	for r := range np {
		f := fmt.Sprintf("%s.rank.%d", out, r)
		b, err := os.ReadFile(f)
		if err == nil {
			sb.Write(b)
			require.NoError(t, os.Remove(f))
		}
	}
	j.stdout = sb.String()
	return j
}

// noneLeft fails unless, within 5 s of its mpirun's return (the kernel's
// time to reap a killed process), no process runs bin.
func noneLeft(t *testing.T, bin string) {
	t.Helper()
	var left []int
	if !waitFor(5*time.Second, func() bool { left = processesOf(bin); return len(left) == 0 }) {
		t.Errorf("rank processes left behind after mpirun returned: %v", left)
	}
}

// verdict matches a scenario verdict line: its outcome, its label's file,
// its variant ("as written" or "with REPLAY") and expectation.
var verdict = regexp.MustCompile(`^scenario: (PASS|FAIL) (\S+) \(.*?\) \((as written|with [^,]+), expect (ok|error)\)`)

// runScenario runs one case under mpirun at the rank count
// rankrun scenario --print-run gives it. It passes when some rank printed
// PASS, none printed FAIL, and, for an "expect ok" variant, the job exited
// 0 (the rule of the shell test this replaced). Stricter
// than it: every verdict line names this file and this variant; an "expect
// ok" variant that exited 0 has exactly one, from world rank 0 (no rank
// failed, so no other rank judged); no rank process outlives the job.
func runScenario(t *testing.T, bin, dir, file string, replay bool) {
	pr := []string{"scenario", "--print-run"}
	if replay {
		pr = append(pr, "--with-replay")
	}
	pj := runJob(t, noMPIBin, append(pr, file)...)
	require.Equal(t, 0, pj.code, "rankrun scenario --print-run\n%v", pj)
	f := strings.Fields(pj.stdout)
	require.NotEmpty(t, f, "rankrun scenario --print-run printed nothing")
	np, err := strconv.Atoi(f[0])
	require.NoError(t, err, "--print-run's rank count: %q", pj.stdout)
	require.Positive(t, np)

	args := []string{"scenario"}
	if replay {
		args = append(args, "--replay-on")
	}
	t.Logf("mpirun -np %d bin/rankrun-mpi %s %s", np, strings.Join(args, " "), file)
	start := time.Now()
	j := rankJob(t, dir, np, bin, append(args, file)...)
	t.Logf("%.2f s, exit %d", time.Since(start).Seconds(), j.code)

	var verdicts []string
	for _, l := range strings.Split(j.stdout, "\n") {
		if strings.HasPrefix(l, "scenario: ") {
			verdicts = append(verdicts, l)
		}
	}
	var pass string
	for _, l := range verdicts {
		m := verdict.FindStringSubmatch(l)
		if !assert.NotNil(t, m, "not a verdict line: %q", l) {
			continue
		}
		assert.NotEqual(t, "FAIL", m[1], "a rank failed the scenario: %s", l)
		assert.Equal(t, filepath.Base(file), m[2], "the verdict's file: %s", l)
		if replay {
			assert.True(t, strings.HasPrefix(m[3], "with "), "the variant with the replay on: %s", l)
		} else {
			assert.Equal(t, "as written", m[3], "the variant: %s", l)
		}
		if m[1] == "PASS" && pass == "" {
			pass = l
		}
	}
	require.NotEmpty(t, pass, "no PASS verdict line (exit %d)\n%v", j.code, j)
	// The shell test read exit 124 and 137 as its timeout's; runJob
	// fails a hang itself, and these codes still fail, as there.
	assert.NotContains(t, []int{124, 137}, j.code, "mpirun exited %d", j.code)
	if strings.Contains(pass, "expect ok)") {
		assert.Equal(t, 0, j.code, "an ok variant passed but the job exited %d", j.code)
		if j.code == 0 {
			assert.Len(t, verdicts, 1, "an ok variant that exited 0: one verdict, world rank 0's")
			assert.True(t, strings.HasSuffix(pass, " [world rank 0]"), "an ok variant's verdict is world rank 0's: %s", pass)
		}
	}
	noneLeft(t, bin)
	if t.Failed() {
		t.Logf("%v", j)
	} else {
		t.Logf("%s", strings.TrimPrefix(pass, "scenario: PASS "))
	}
}

// Every hand-written case, at the rank count its file gives.
func TestMpirunScenarios(t *testing.T) {
	dir := t.TempDir()
	bin := privateCopy(t, dir)
	testdata, err := filepath.Abs(filepath.Join("..", "multirank", "testdata"))
	require.NoError(t, err)
	for _, c := range scenarioCases {
		t.Run(c, func(t *testing.T) {
			name, replay := strings.CutSuffix(c, "+replay")
			runScenario(t, bin, dir, filepath.Join(testdata, name+".txt"), replay)
		})
	}
}

// The generated attention-DP family (rankrun scenario --generate adp:
// every adp layout pair of up to 4 ranks a side, async and sync, and the
// layouts the adp + TP deadlock was reported with). MPI_ADP=0 skips it.
func TestMpirunScenariosADP(t *testing.T) {
	if os.Getenv("MPI_ADP") == "0" {
		t.Skip("MPI_ADP=0")
	}
	dir := t.TempDir()
	bin := privateCopy(t, dir)
	gen := filepath.Join(dir, "adp")
	g := runJob(t, noMPIBin, "scenario", "--generate", "adp", "--out", gen)
	require.Equal(t, 0, g.code, "rankrun scenario --generate adp\n%v", g)
	files := strings.Fields(g.stdout)
	// Each file, and as many as written (a family that came out empty
	// would pass nothing).
	written, err := filepath.Glob(filepath.Join(gen, "*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	require.ElementsMatch(t, written, files, "the files --generate printed against those it wrote")
	// Under mpirun every bound is real time on an oversubscribed host (up
	// to 8 busy-polling ranks on 2 cores, with make test's load beside
	// them): the family's in-process bounds (5 s a collective and a stall,
	// 40 s a run) get the host's slack. That slows only a failure's report,
	// never a verdict: every case expects ok, and a deadlock still ends in
	// a named timeout well within the job's bound.
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := string(b)
		for _, r := range [][2]string{{"\ncollective-timeout: 5s\n", "\ncollective-timeout: 20s\n"},
			{"\nstall-timeout: 5s\n", "\nstall-timeout: 20s\n"}, {"\ntimeout: 40s\n", "\ntimeout: 100s\n"}} {
			require.Contains(t, text, r[0], "%s: the generated bound this test widens", f)
			text = strings.Replace(text, r[0], r[1], 1)
		}
		require.NoError(t, os.WriteFile(f, []byte(text), 0o644))
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runScenario(t, bin, dir, f, false)
		})
	}
}

// An exit fault on GEN rank 1 (world rank 2) of ctx tp=1 -> gen tp=2 ends
// the whole mpirun job non-zero within KILL_BOUND seconds (30), naming
// that rank, with world rank 0's one JSON report naming the
// injected exit on world rank 2, and no rank process left behind; async,
// and sync checked.
func TestMpirunExitFaultEndsTheJob(t *testing.T) {
	bound := time.Duration(envInt(t, "KILL_BOUND", 30)) * time.Second
	dir := t.TempDir()
	bin := privateCopy(t, dir)
	for _, c := range []struct {
		name, transfer string
		extra          []string
	}{
		{"async", "async", nil},
		{"sync-checked", "sync", []string{"--checked"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"run", "--ctx", "tp=1", "--gen", "tp=2", "--requests", "16", "--transfer", c.transfer,
				"--fault", "exit@gen:1,req=5", "--json"}, c.extra...)
			t.Logf("mpirun -np 3 bin/rankrun-mpi %s", strings.Join(args, " "))
			start := time.Now()
			j := rankJob(t, dir, 3, bin, args...)
			wall := time.Since(start)
			assert.NotEqual(t, 0, j.code, "exit 0, want non-zero")
			assert.NotContains(t, []int{124, 137}, j.code, "mpirun exited %d", j.code)
			assert.Less(t, wall, bound, "the job took %v, bound %v", wall, bound)
			assert.Contains(t, j.stderr, "injected fault")
			// The shell test took either name; both must be there.
			assert.Regexp(t, `gen rank 1 \(world rank 2\)`, j.stderr, "the failing rank by both its names")
			var r report
			decode(t, j.stdout, &r, j) // exactly one JSON document on stdout, of all ranks'
			requireKeys(t, j, "error")
			if assert.NotNil(t, r.Error, "the report has no error") {
				assert.Equal(t, "injected", r.Error.Kind)
				assert.Equal(t, []int{2}, r.Error.Ranks)
			}
			noneLeft(t, bin)
			if t.Failed() {
				t.Logf("%v", j)
			}
		})
	}
}

// processesOf lists the processes whose executable is path (also once the
// file is deleted).
func processesOf(path string) []int {
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", d.Name(), "exe"))
		if err == nil && (exe == path || exe == path+" (deleted)") {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}
