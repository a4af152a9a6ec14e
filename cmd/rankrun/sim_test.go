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

// The seed's layouts (ctx1_dep4_gen1_tep8: CTX attention-DP 4 with EP 4,
// GEN TP 8 with EP 8) on DeepSeek-R1 FP4 and GB200 run to completion in
// simulation, and ep reaches the step's cost: EP 8 under TP 8 pays its
// busiest expert part, so a small batch decodes slower than with expert TP.
func TestSeedLayoutsDeepSeekR1(t *testing.T) {
	run := func(gen string) map[string]any {
		code, out, errOut := cli(t, "run", "--backend", "sim", "--json", "--model", "deepseek-r1-fp4", "--hardware", "gb200",
			"--ctx", "dp=4,ep=4,adp", "--gen", gen, "--requests", "4", "--ctx-blocks", "32", "--gen-blocks", "32", "--kv-sample", "16", "--seed", "3")
		require.Equal(t, 0, code, errOut)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		require.Equal(t, "dp=4,ep=4,adp", v["ctx"])
		require.Equal(t, gen, v["gen"])
		require.Equal(t, 4.0, v["requests_completed"], gen)
		require.Equal(t, 0.0, v["requests_failed"], gen)
		require.Empty(t, v["errors"], gen)
		// MLA's latent moves as one head of 288 elements a half: the sample
		// divides that, not the attention's head dim of 128.
		require.Contains(t, v["compute"], "KV sampled 1/16 (links charged for every byte)")
		return v
	}
	tpot := func(v map[string]any) float64 { return v["tpot_ms"].(map[string]any)["p50"].(float64) }
	ep, tp := run("tp=8,ep=8"), run("tp=8")
	require.Greater(t, tpot(ep), tpot(tp))
	code, _, errOut := cli(t, "run", "--backend", "sim", "--model", "deepseek-r1-fp4", "--hardware", "gb200",
		"--ctx", "dp=4,ep=4,adp", "--gen", "tp=8,ep=8", "--requests", "4", "--kv-sample", "64")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--kv-sample 64: must be a positive divisor of the model's KV head dim (288)")
}
