package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// stripWall removes every field whose name starts with wall_ (the only
// host-dependent figures of a simulated report), at any depth.
func stripWall(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if strings.HasPrefix(k, "wall_") {
				delete(x, k)
				continue
			}
			x[k] = stripWall(e)
		}
	case []any:
		for i := range x {
			x[i] = stripWall(x[i])
		}
	}
	return v
}

func simReport(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, append([]string{"run", "--backend", "sim", "--json"}, args...)...)
	require.Equal(t, 0, code, errOut)
	var v any
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	b, err := json.Marshal(stripWall(v))
	require.NoError(t, err)
	return string(b)
}

// One seed, one run: two simulated runs of the same seed give the same
// JSON report byte for byte once the wall_ fields are dropped, also while
// the machine is busy with other work (a CPU hog on every core).
func TestSimRunIsReproducible(t *testing.T) {
	args := []string{"--ctx", "tp=2", "--gen", "tp=2,dp=2,adp", "--requests", "40", "--arrival", "poisson=2000", "--layers", "2", "--head-dim", "8",
		"--prefill-per-token", "20us", "--decode-per-step", "2ms", "--hardware", "h200-nvlink-ib400", "--checked", "--seed", "9"}
	quiet := simReport(t, args...)
	require.Equal(t, quiet, simReport(t, args...), "two runs of one seed differ")

	// Load every core with other processes (this test binary, spinning).
	var hogs []*exec.Cmd
	for range runtime.NumCPU() {
		h := exec.Command(os.Args[0], "-test.run=^TestHelperHog$")
		h.Env = append(os.Environ(), "RANKRUN_HOG=1")
		require.NoError(t, h.Start())
		hogs = append(hogs, h)
	}
	busy := simReport(t, args...)
	for _, h := range hogs {
		_ = h.Process.Kill()
		_ = h.Wait()
	}
	require.Equal(t, quiet, busy, "the run changed when the machine was busy")
	require.NotEqual(t, quiet, simReport(t, append(args, "--schedule-seed", "10")...), "another schedule seed gave the same run")
	require.Contains(t, quiet, `"backend":"sim"`)
}

// TestHelperHog spins until killed: the CPU hog of the reproducibility test.
func TestHelperHog(t *testing.T) {
	if os.Getenv("RANKRUN_HOG") != "1" {
		t.Skip("the CPU hog of TestSimRunIsReproducible")
	}
	for x := 0; ; x++ {
	}
}
