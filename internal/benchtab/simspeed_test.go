package benchtab

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A timed run reads its virtual time, peak RSS and bytes moved from the
// child's JSON report; a child that fails is named by its first line of
// stderr, and one whose report does not parse says so.
func TestTimeSimRun(t *testing.T) {
	exe := func(body string) string {
		p := filepath.Join(t.TempDir(), "rankrun")
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
		return p
	}
	good := exe(`[ "$*" = "run --backend sim --json --model m --requests 3" ] || exit 3
echo '{"duration_s": 2.5, "wall_peak_rss_bytes": 4096, "bytes_moved": 8192}'`)
	tm, err := timeSimRun(good, "--model m  --requests 3")
	require.NoError(t, err)
	require.Equal(t, 2.5, tm.virtual)
	require.Equal(t, int64(4096), tm.rss)
	require.Equal(t, int64(8192), tm.moved)
	require.Greater(t, tm.wall, 0.0)

	_, err = timeSimRun(exe("echo 'bad flag' >&2; echo second >&2; exit 2"), "")
	require.EqualError(t, err, "exit status 2: bad flag")
	_, err = timeSimRun(exe("echo not json"), "")
	require.ErrorContains(t, err, "its report: ")
}

func TestFmtGiB(t *testing.T) {
	require.Equal(t, "1.00 GiB", fmtGiB(simRSSBudget))
	require.Equal(t, "0.20 GiB", fmtGiB(200<<20), "below a GiB still in GiB (units.Bytes would say MiB)")
}
