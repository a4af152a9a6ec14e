package benchtab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// simSpeedSection is BENCHMARKS.md's section on how fast the simulator
// runs: virtual seconds per wall second of a whole `rankrun run --backend
// sim` process, best of a few, with its CPU time and peak RSS.
const simSpeedSection = "7 simulation speed (a process each, best of the runs; virtual s per wall s)"

// simSpeedRuns are the runs that section times: the seeds' layouts and a
// dense one at their defaults (--kv-sample unset: one element of each
// head), DeepSeek at rack scale, and the control plane at 4096 ranks.
// goal is the speed each should reach (x real time); for the 4096-rank
// run, which models no time, wallGoal is a wall time instead.
var simSpeedRuns = []struct {
	name, args string
	goal       float64
	wallGoal   float64
	floor      bool // also measure the floor its bytes set (simFloorRow)
}{
	{"deepseek-r1-fp4 / gb200, ctx dp=4,ep=4,adp -> gen tp=8,ep=8, 128 requests of 8192/256, poisson=20",
		"--model deepseek-r1-fp4 --hardware gb200 --ctx dp=4,ep=4,adp --gen tp=8,ep=8 --input 8192 --output 256 --arrival poisson=20 --requests 128", 20, 0, false},
	{"gpt-oss-120b / gb200, ctx tp=1 -> gen tp=4, 64 requests of 8192/1024, closed=16",
		"--model gpt-oss-120b --hardware gb200 --ctx tp=1 --gen tp=4 --input 8192 --output 1024 --arrival closed=16 --requests 64", 100, 0, true},
	{"llama-3-70b / h100, ctx tp=4 -> gen tp=4, 1000 requests of 1024/256, poisson=8",
		"--model llama-3-70b --hardware h100 --ctx tp=4 --gen tp=4 --input 1024 --output 256 --arrival poisson=8 --requests 1000", 100, 0, false},
	{"deepseek-r1-fp4 / gb200 at rack scale, ctx dp=16,ep=16,adp -> gen dp=32,ep=32,adp (48 ranks), 200 requests of 2048/256, poisson=100",
		"--model deepseek-r1-fp4 --hardware gb200 --ctx dp=16,ep=16,adp --gen dp=32,ep=32,adp --input 2048 --output 256 --arrival poisson=100 --requests 200", 5, 0, false},
	{"control plane, 4096 ranks (ctx dp=2048 -> gen dp=2048, no model), 20,000 requests",
		"--ctx dp=2048 --gen dp=2048 --layers 1 --kv-heads 1 --head-dim 8 --requests 20000", 0, 3, false},
}

// simRSSBudget is the peak RSS each of simSpeedRuns must stay within.
const simRSSBudget = 1 << 30

// simTiming is one process's run.
type simTiming struct {
	virtual, wall, user, sys float64 // seconds
	rss                      int64   // peak, bytes
	moved                    int64   // KV bytes the run moved (its sample's)
}

// timeSimRun runs exe's `run --backend sim ARGS --json` as a process of
// its own and times it.
func timeSimRun(exe, args string) (simTiming, error) {
	cmd := exec.Command(exe, append([]string{"run", "--backend", "sim", "--json"}, strings.Fields(args)...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start).Seconds()
	if err != nil {
		return simTiming{}, fmt.Errorf("%v: %s", err, FirstLine(errb.String()))
	}
	var rep struct {
		Duration float64 `json:"duration_s"`
		PeakRSS  int64   `json:"wall_peak_rss_bytes"` // the child's own (VmHWM)
		Moved    int64   `json:"bytes_moved"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return simTiming{}, fmt.Errorf("its report: %w", err)
	}
	return simTiming{virtual: rep.Duration, wall: wall, user: cmd.ProcessState.UserTime().Seconds(), sys: cmd.ProcessState.SystemTime().Seconds(),
		rss: rep.PeakRSS, moved: rep.Moved}, nil
}

// simSpeedRows times each of simSpeedRuns reps times (best wall time
// kept) with this binary.
func simSpeedRows(reps int, add func(Row), missing func(string, error)) {
	exe, err := os.Executable()
	if err != nil {
		missing("simulation speed", err)
		return
	}
	for _, r := range simSpeedRuns {
		var best simTiming
		var rssMax int64
		for i := range reps {
			t, err := timeSimRun(exe, r.args)
			if err != nil {
				missing("simulation speed: "+r.name, err)
				best.wall = 0
				break
			}
			rssMax = max(rssMax, t.rss)
			if i == 0 || t.wall < best.wall {
				best = t
			}
		}
		if best.wall == 0 {
			continue
		}
		note := fmt.Sprintf("best of %d: %.3g s of wall time (user %.3g s + sys %.3g s of CPU) for %.4g s of virtual time; peak RSS %s (the most of the runs; budget %s)",
			reps, best.wall, best.user, best.sys, best.virtual, fmtGiB(rssMax), fmtGiB(simRSSBudget))
		var row Row
		if r.wallGoal > 0 {
			row = RatioRow(Row{Section: simSpeedSection, Figure: r.name + ": wall time", Value: best.wall, Unit: "s",
				Reference: fmt.Sprintf("the goal, %g s", r.wallGoal), RefValue: r.wallGoal, Goal: "<=1", Note: note})
		} else {
			row = RatioRow(Row{Section: simSpeedSection, Figure: r.name, Value: best.virtual / best.wall, Unit: "x real time",
				Reference: "real time (1 virtual s a wall s)", RefValue: 1, Goal: fmt.Sprintf(">=%g", r.goal), Note: note})
		}
		if row.Met != nil && rssMax > simRSSBudget {
			row.Met = ptr(false)
		}
		add(row)
		if r.floor {
			fr, err := simFloorRow(r.name, best, reps)
			if err != nil {
				missing("simulation speed: the floor of "+r.name, err)
				continue
			}
			add(fr)
		}
	}
}

func fmtGiB(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
