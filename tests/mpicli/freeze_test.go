//go:build mpirun

package mpicli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A frozen rank under mpirun, checked (the default) or --unchecked, ends
// the job within the collective timeout plus a few seconds, naming the
// rank.
//
// For each mode and each world rank: mpirun -np 3 rankrun-mpi run (ctx
// tp=1 -> gen tp=2, a workload of tens of seconds, --collective-timeout
// COLL_TIMEOUT), then SIGSTOP that rank's process FREEZE_AFTER seconds
// after world rank 0 logged its first 100 requests finished. The job must
// end non-zero (not ended by the test) within COLL_TIMEOUT + FREEZE_SLACK
// of the freeze, stderr must report a collective timeout and name the
// frozen rank by its world rank (the timeout's "never arrived" list), and
// no rank process may be left once mpirun has returned. Checked, every
// rank that can writes its failure dump, stderr says where, and rankrun
// analyze names the frozen rank absent where its peers wait, with its
// last collective and the requests in flight with it. A job still running
// 10 s past the bound is ended by the test and fails. Cleanup wakes
// (SIGCONT) and kills any rank process left, the frozen one included.
//
// Freezing the only CTX rank (world rank 0, also the router) leaves the
// GEN ranks idle, outside any collective with it: their leader's liveness
// probe (executor probeIfStuck: no progress for the collective timeout
// with work outstanding) asks every rank through the stall inspector and
// names the one that does not answer.
//
// Environment (the defaults are make test-mpi's):
//   - FREEZE_RANKS: world ranks to freeze, one job each ("2 1 0": GEN
//     ranks 1 and 0, then the CTX rank);
//   - FREEZE_MODES: "unchecked checked" (unchecked: --unchecked; checked:
//     the default);
//   - COLL_TIMEOUT: seconds, --collective-timeout (3);
//   - FREEZE_SLACK: seconds allowed past the collective timeout (8);
//   - FREEZE_AFTER: seconds from the first 100 requests finished to the
//     freeze (2);
//   - FREEZE_KEEP=PREFIX keeps each case's stderr as PREFIX.MODE.rankR.err.
//
// FREEZE_SLACK is derived from the runtime's own bounds with room for a
// host several times slower: the stall inspector's answer window
// (comm.InspectTimeout, 2 s), then the abort and mpirun's teardown
// (measured 0.7-1.4 s with two busy loops beside the job; 6 s is over 4x
// that).
func TestMpirunFrozenRankIsNamed(t *testing.T) {
	coll := envInt(t, "COLL_TIMEOUT", 3)
	slack := envInt(t, "FREEZE_SLACK", 8)
	after := envInt(t, "FREEZE_AFTER", 2)
	modes := envList(t, "FREEZE_MODES", "unchecked checked")
	var ranks []int
	for _, r := range envList(t, "FREEZE_RANKS", "2 1 0") {
		n, err := strconv.Atoi(r)
		require.NoError(t, err, "FREEZE_RANKS: %q", r)
		ranks = append(ranks, n)
	}
	for _, m := range modes {
		require.Contains(t, []string{"unchecked", "checked"}, m, "FREEZE_MODES")
	}
	bound := time.Duration(coll+slack) * time.Second
	for _, mode := range modes {
		for _, r := range ranks {
			t.Run(mode+"/world-rank-"+strconv.Itoa(r), func(t *testing.T) {
				freezeCase(t, mode, r, coll, after, bound)
			})
		}
	}
}

// envList is the words of environment variable name, or of def when it is
// unset or empty.
func envList(t *testing.T, name, def string) []string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	f := strings.Fields(v)
	require.NotEmpty(t, f, "%s=%q: empty", name, v)
	return f
}

// neverArrived matches a collective timeout's list of the ranks that
// never arrived: on the world it names them directly, on a sub-group it
// adds "(world ranks [...])".
var neverArrived = regexp.MustCompile(`on group "([^"]+)"[^\n]*?ranks \[([\d ]*)\] never arrived(?: \(world ranks \[([\d ]*)\]\))?`)

// namesNeverArrived reports whether stderr names world rank r among the
// ranks that never arrived.
func namesNeverArrived(stderr string, r int) bool {
	has := func(list string) bool {
		for _, f := range strings.Fields(list) {
			if n, err := strconv.Atoi(f); err == nil && n == r {
				return true
			}
		}
		return false
	}
	for _, m := range neverArrived.FindAllStringSubmatchIndex(stderr, -1) {
		group, missing := stderr[m[2]:m[3]], stderr[m[4]:m[5]]
		if m[6] >= 0 {
			if has(stderr[m[6]:m[7]]) {
				return true
			}
		} else if group == "world" && has(missing) {
			return true
		}
	}
	return false
}

func freezeCase(t *testing.T, mode string, frozen, coll, after int, bound time.Duration) {
	dir := t.TempDir()
	bin := privateCopy(t, dir)
	dumps := filepath.Join(dir, "dumps")
	// --log-level debug: world rank 0 (the router) logs "requests
	// finished" every 100 requests, the sign that the run is under way.
	args := []string{"run", "--ctx", "tp=1", "--gen", "tp=2", "--requests", "5000", "--arrival", "rate=500",
		"--collective-timeout", strconv.Itoa(coll) + "s", "--log-level", "debug"}
	if mode == "unchecked" {
		args = append(args, "--unchecked")
	} else {
		args = append(args, "--dump-dir", dumps)
	}
	t.Logf("mpirun -np 3 rankrun-mpi %s, SIGSTOP world rank %d %d s after its first 100 requests finished", strings.Join(args, " "), frozen, after)
	b := startJob(t, dir, append([]string{"-np", "3", bin}, args...)...)
	// Runs before startJob's cleanup (SIGTERM to mpirun): a stopped rank
	// is woken and killed first.
	t.Cleanup(func() { contKill(processesOf(bin)) })
	ended := func() bool {
		select {
		case <-b.done:
			return true
		default:
			return false
		}
	}
	errTail := func() string {
		e, _ := os.ReadFile(b.stderr)
		return tail(string(e))
	}

	// The rank's process, among this mpirun's children.
	var pid int
	waitFor(30*time.Second, func() bool {
		var ok bool
		pid, ok = processOfWorldRank(b.cmd.Process.Pid, frozen)
		return ok || ended()
	})
	require.NotZero(t, pid, "no process for world rank %d within 30 s\n%s", frozen, errTail())
	// Under way first: on a loaded host the job can take longer to start
	// than the freeze delay, and a rank frozen before any request is in
	// flight tests nothing of what follows.
	if !waitFor(60*time.Second, func() bool { return b.progressed(3) || ended() }) || !b.progressed(3) {
		t.Errorf("no 100 requests finished within 60 s of the start (or not every rank started)")
	}
	time.Sleep(time.Duration(after) * time.Second) // a deliberate delay after the event above
	require.False(t, ended(), "the job ended before the freeze\n%s", errTail())
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	frozenAt := time.Now()

	// Watch the job for the bound and 10 s more; a job still running then
	// hangs: end it rather than wait for it.
	hung := false
	select {
	case <-b.done:
	case <-time.After(bound + 10*time.Second):
		hung = true
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		contKill(processesOf(bin))
		select {
		case <-b.done:
		case <-time.After(15 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	}
	wall := time.Since(frozenAt)
	j := b.wait(t, time.Minute) // it has ended
	t.Logf("ended %.2f s after the freeze, exit %d", wall.Seconds(), j.code)
	if hung {
		t.Errorf("still running %v after the freeze (hung; ended by the test)", bound+10*time.Second)
	} else {
		assert.NotEqual(t, 0, j.code, "exit 0, want non-zero")
	}
	assert.LessOrEqual(t, wall, bound, "ended %.2f s after the freeze, bound %v collective timeout + %v slack",
		wall.Seconds(), time.Duration(coll)*time.Second, bound-time.Duration(coll)*time.Second)
	assert.True(t, namesNeverArrived(j.stderr, frozen), "stderr does not name world rank %d as never arrived", frozen)
	assert.Contains(t, j.stderr, "comm: collective timeout")
	if mode == "checked" {
		assert.Contains(t, j.stderr, "failure dumps (one per rank that could write one) are in "+dumps, "stderr says where the dumps are")
		checkFreezeStory(t, dumps, frozen)
	}
	noneLeft(t, bin)
	if k := os.Getenv("FREEZE_KEEP"); k != "" {
		assert.NoError(t, os.WriteFile(k+"."+mode+".rank"+strconv.Itoa(frozen)+".err", []byte(j.stderr), 0o644))
	}
	if t.Failed() {
		t.Logf("%v", j)
	} else if i := strings.Index(j.stderr, "never arrived"); i >= 0 {
		s := j.stderr[max(0, strings.LastIndexByte(j.stderr[:i], '\n')+1):]
		if n := strings.IndexByte(s, '\n'); n >= 0 {
			s = s[:n]
		}
		t.Logf("%.300s", s)
	}
}

// checkFreezeStory runs rankrun analyze on a frozen job's dumps. mpirun
// wakes a stopped rank (SIGCONT) when it tears the job down, so the frozen
// rank may have written a dump too: either way the story must name it
// absent where its peers wait, with its last collective and the requests
// in flight with it. Every key read must be there.
func checkFreezeStory(t *testing.T, dumps string, frozen int) {
	t.Helper()
	j := runJob(t, mpiBin, "analyze", "--json", dumps)
	// analyze exits 1 when its story names a hang (this one), 2 when it
	// has none.
	require.LessOrEqual(t, j.code, 1, "rankrun analyze failed on the dumps\n%v", j)
	requireKeys(t, j, "dumped", "waits")
	var s struct {
		Dumped []int `json:"dumped"`
		Waits  []struct {
			Absent []json.RawMessage `json:"absent"`
		} `json:"waits"`
	}
	decode(t, j.stdout, &s, j)
	assert.NotEmpty(t, s.Dumped, "no rank wrote a dump")
	type absence struct {
		Rank  int     `json:"rank"`
		Last  uint64  `json:"last_seq"`
		Holds []int64 `json:"holds"`
	}
	var absent []absence
	for i, w := range s.Waits {
		for k, raw := range w.Absent {
			var keys map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(raw, &keys))
			for _, key := range []string{"rank", "last_seq"} {
				require.Contains(t, keys, key, "waits[%d].absent[%d] has no %q: %s", i, k, key, raw)
			}
			var a absence
			require.NoError(t, json.Unmarshal(raw, &a))
			if a.Rank == frozen {
				absent = append(absent, a)
			}
		}
	}
	if !assert.NotEmpty(t, absent, "no wait names rank %d absent\n%s", frozen, j.stdout) {
		return
	}
	last := slices.MaxFunc(absent, func(a, b absence) int { return int(a.Last) - int(b.Last) })
	assert.NotZero(t, last.Last, "no last collective for rank %d: %+v", frozen, absent)
	assert.True(t, slices.ContainsFunc(absent, func(a absence) bool { return len(a.Holds) > 0 }),
		"no request in flight with rank %d: %+v", frozen, absent)
}

// contKill wakes (SIGCONT) and kills (SIGKILL) each process, as the
// shell test this replaced did for a rank it had stopped.
func contKill(pids []int) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGCONT)
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}
