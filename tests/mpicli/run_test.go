//go:build mpirun

package mpicli

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readRequests reads a --requests-out file, sorted by id (under mpirun the
// other ranks' records come at the end).
func readRequests(t *testing.T, path string) []requestRecord {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []requestRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r requestRecord
		require.NoError(t, decodeLine(sc.Bytes(), &r), "%s: %q", path, sc.Text())
		out = append(out, r)
	}
	require.NoError(t, sc.Err())
	slices.SortFunc(out, func(a, b requestRecord) int { return a.ID - b.ID })
	return out
}

// A checked run of ctx tp=1 -> gen tp=4 under mpirun -np 5 completes every
// request, leaks nothing, verifies its bytes, and counts what the
// in-process run of the same flags counts, request by request.
func TestMpirunRunEqualsInProcess(t *testing.T) {
	dir := t.TempDir()
	flags := []string{"run", "--ctx", "tp=1", "--gen", "tp=4", "--requests", "32", "--json", "--checked"}
	mj := mpirun(t, 5, mpiBin, append(flags, "--requests-out", filepath.Join(dir, "mpi.jsonl"))...)
	require.Equal(t, 0, mj.code, "%v", mj)
	lj := runJob(t, noMPIBin, append(flags, "--requests-out", filepath.Join(dir, "local.jsonl"))...)
	require.Equal(t, 0, lj.code, "%v", lj)
	var mpi, local report
	decode(t, mj.stdout, &mpi, mj)
	decode(t, lj.stdout, &local, lj)
	// A key the struct reads but the report lacks would read as zero:
	// each must be there, on both sides.
	keys := []string{"backend", "ranks", "wall_seconds", "duration_s", "requests_completed", "requests_failed", "requests_cancelled",
		"bytes_moved", "bytes_verified", "leaked_blocks", "pinned_blocks_at_end", "ttft_ms", "errors", "error"}
	requireKeys(t, mj, keys...)
	requireKeys(t, lj, keys...)

	assert.Equal(t, "mpi", mpi.Backend)
	assert.Equal(t, 5, mpi.Ranks)
	assert.Equal(t, 32, mpi.RequestsCompleted)
	assert.Zero(t, mpi.RequestsFailed)
	assert.Zero(t, mpi.LeakedBlocks)
	assert.Zero(t, mpi.PinnedAtEnd)
	assert.Positive(t, mpi.BytesVerified)
	assert.Empty(t, mpi.Errors)
	assert.Nil(t, mpi.Error)
	assert.Equal(t, 32, mpi.TTFT.N)
	// The report says how long the job ran (it once said 0 s under
	// mpirun): more than nothing, and no more than the run plus a minute
	// of start-up.
	assert.Greater(t, mpi.WallSeconds, 0.0)
	assert.Less(t, mpi.WallSeconds, mpi.DurationS+60)
	for _, f := range []struct {
		name       string
		mpi, local any
	}{
		{"ranks", mpi.Ranks, local.Ranks}, {"requests_completed", mpi.RequestsCompleted, local.RequestsCompleted},
		{"requests_failed", mpi.RequestsFailed, local.RequestsFailed}, {"requests_cancelled", mpi.RequestsCancelled, local.RequestsCancelled},
		{"bytes_moved", mpi.BytesMoved, local.BytesMoved}, {"bytes_verified", mpi.BytesVerified, local.BytesVerified},
		{"leaked_blocks", mpi.LeakedBlocks, local.LeakedBlocks}, {"pinned_blocks_at_end", mpi.PinnedAtEnd, local.PinnedAtEnd},
		{"ttft_ms.n", mpi.TTFT.N, local.TTFT.N},
	} {
		assert.Equal(t, f.local, f.mpi, "%s: mpirun against in-process", f.name)
	}
	mr, lr := readRequests(t, filepath.Join(dir, "mpi.jsonl")), readRequests(t, filepath.Join(dir, "local.jsonl"))
	assert.Len(t, mr, 32, "one --requests-out record per request")
	seen := map[int]bool{}
	for _, r := range mr {
		assert.False(t, seen[r.ID], "request %d recorded twice in --requests-out", r.ID)
		seen[r.ID] = true
	}
	assert.Equal(t, lr, mr, "request ids and states, mpirun against in-process")
}

// Layouts that need 5 ranks under mpirun -np 4 fail at once, naming both
// counts, and print no report.
func TestMpirunWrongRankCountIsNamed(t *testing.T) {
	j := mpirun(t, 4, mpiBin, "run", "--ctx", "tp=1", "--gen", "tp=4", "--requests", "32", "--json", "--checked")
	require.NotEqual(t, 0, j.code, "%v", j)
	assert.Equal(t, 1, lines(j.stderr, "rankrun:"), "one line, from world rank 0\n%v", j)
	assert.Contains(t, j.stderr, "-np 5")
	assert.Contains(t, j.stderr, "world has 4 ranks")
	assert.Empty(t, j.stdout, "no report")
}

// A binary built without MPI refuses to run under mpirun (never as N
// copies of rank 0), saying why, and prints no report.
func TestMpirunRefusesABuildWithoutMPI(t *testing.T) {
	j := mpirun(t, 2, noMPIBin, "run", "--requests", "4", "--json")
	require.NotEqual(t, 0, j.code, "%v", j)
	assert.Equal(t, 1, lines(j.stderr, "rankrun:"), "one line, from world rank 0\n%v", j)
	assert.Contains(t, j.stderr, "built without MPI")
	assert.Empty(t, j.stdout, "no report")
}

// Expert parallelism under attention-DP: each step's dispatch counts go
// through a real MPI all-to-all on both sides, and a rank whose counts
// differ ends the job non-zero, named by the peer that got them: a CTX
// rank (world rank 0) and the last GEN rank.
func TestMpirunExpertDispatch(t *testing.T) {
	ep := []string{"run", "--model", "gpt-oss-120b", "--hardware", "gb200", "--ctx", "dp=2,ep=2,adp", "--gen", "dp=2,ep=2,adp",
		"--requests", "4", "--input", "128", "--output", "8", "--json"}
	j := mpirun(t, 4, mpiBin, ep...)
	require.Equal(t, 0, j.code, "%v", j)
	requireKeys(t, j, "requests_completed", "errors")
	var r report
	decode(t, j.stdout, &r, j)
	assert.Equal(t, 4, r.RequestsCompleted)
	assert.Empty(t, r.Errors)
	for _, c := range []struct{ fault, who string }{
		{"misroute@ctx:0,req=1", "from ctx rank 0 (world rank 0)"},
		{"misroute@gen:1,req=2", "from gen rank 1 (world rank 3)"},
	} {
		t.Run(c.fault, func(t *testing.T) {
			j := mpirun(t, 4, mpiBin, append(slices.Clone(ep), "--fault", c.fault)...)
			require.NotEqual(t, 0, j.code, "%v", j)
			assert.Regexp(t, "ep dispatch counts disagree.*"+regexpQuote(c.who), j.stderr)
		})
	}
}

// Chunked prefill under mpirun: a CTX group of two (tp=2) and a CTX
// attention-DP group with EP dispatch take the same chunks on every rank
// (no collective decides them); every request completes and the CTX line
// counts the chunks that did not end their prompt.
func TestMpirunChunkedPrefill(t *testing.T) {
	for _, layout := range [][]string{{"--ctx", "tp=2", "--gen", "tp=2"}, {"--ctx", "dp=2,ep=2,adp", "--gen", "dp=2,ep=2,adp"}} {
		t.Run(strings.Join(layout, " "), func(t *testing.T) {
			args := append([]string{"run", "--model", "gpt-oss-120b", "--hardware", "gb200"}, layout...)
			args = append(args, "--requests", "6", "--input", "300", "--output", "4", "--max-tokens", "128", "--chunked", "--json")
			j := mpirun(t, 4, mpiBin, args...)
			require.Equal(t, 0, j.code, "%v", j)
			requireKeys(t, j, "requests_completed", "errors", "scheduler", "instances", "bytes_moved", "bytes_verified")
			var r report
			decode(t, j.stdout, &r, j)
			assert.Equal(t, 6, r.RequestsCompleted)
			assert.Empty(t, r.Errors)
			assert.True(t, strings.HasSuffix(r.Scheduler, "chunked"), r.Scheduler)
			var ctxChunks = -1
			for _, in := range r.Instances {
				if in.Role == "ctx" {
					ctxChunks = in.PrefillChunks
				}
			}
			assert.GreaterOrEqual(t, ctxChunks, 6, "300 tokens under 128: at least two unfinished chunks each")
			assert.Positive(t, r.BytesMoved)
			assert.Equal(t, r.BytesMoved, r.BytesVerified)
		})
	}
}

// A simulation-only flag under mpirun changes nothing: world rank 0 says
// so once (not once a rank), and the run completes.
func TestMpirunSimOnlyFlagNotedOnce(t *testing.T) {
	j := mpirun(t, 2, mpiBin, "run", "--ctx", "tp=1", "--gen", "tp=1", "--requests", "4", "--json", "--strategy", "pct")
	require.Equal(t, 0, j.code, "%v", j)
	assert.Equal(t, 1, strings.Count(j.stderr, "note: --strategy applies to --backend sim only; this mpi run ignores it"), "%v", j)
}
