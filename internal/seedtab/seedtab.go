package seedtab

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/internal/benchtab"
	"github.com/rankrun/rankrun/runspec"
)

// Seed000Job is seed 000's perf test (disagg gen_only, GB200, DeepSeek-R1
// FP4, 8k in / 1k out, con1, ctx1_dep4 gen1_tep8): its model, hardware and
// layouts (CTX attention-DP 4 with EP 4, GEN TP 8 with EP 8), without
// MTP (not modelled: each output token is a decode step). Two requests,
// so that a second one meets the CTX's idle loop.
const Seed000Job = "--model deepseek-r1-fp4 --hardware gb200 --ctx dp=4,ep=4,adp --gen tp=8,ep=8 --input 8192 --output 1024 --arrival closed=1 --requests 2 --kv-sample 16"

// Seed001Job is seed 001's perf-sanity test (gpt-oss-120b FP4 on GB200,
// 8k in / 1k out, con1024, ctx tp=1 -> gen tp=4, sync transfers): 256
// requests, enough to fill the CTX pool (~170 requests of 8k) when nothing
// is reaped. ~100 s and 6 GB of host memory here.
const Seed001Job = "--model gpt-oss-120b --hardware gb200 --ctx tp=1 --gen tp=4 --transfer sync --input 8192 --output 1024 --arrival closed=1024 --requests 256 --kv-sample 64"

// BlockingJob is a run on which the #15139 shape's cost is measured:
// TensorRT-LLM #15139 added a blocking per-iteration agreement on transfer
// outcomes and a benchmark fell from 1573 to 817 tokens/s (#16634 made it
// asynchronous again); --replay blocking-outcomes brings back its shape, a
// CTX that waits for its sends before it agrees. (The 817 came from CTX PP
// stages reaching the synchronous PP agreement apart, which the lockstep
// stages here cannot show: executor.BlockingOutcomes.)
type BlockingJob struct {
	Name, Args, Why string
}

// BlockingJobs are seed 001's shape, where a handover is short against a
// prefill, and the replay's own example, where it is not.
var BlockingJobs = func() []BlockingJob {
	example, _ := executor.ReplayExample(executor.BlockingOutcomes)
	return []BlockingJob{
		{"seed 001's shape (gpt-oss-120b, GB200, ctx tp=1 -> gen tp=4, 8k/1k, con16)",
			"--model gpt-oss-120b --hardware gb200 --ctx tp=1 --gen tp=4 --input 8192 --output 1024 --arrival closed=16 --requests 16 --kv-sample 64",
			"a handover over NVLink takes a few ms against a 92 ms prefill, and GEN takes each request at once: the blocking wait has almost nothing to wait for"},
		{"KV across a 400G NIC (ctx tp=8 on one node -> gen tp=1 on the next, 2k prompts)", strings.TrimPrefix(example, "--backend sim "),
			"each request's KV takes about as long to cross as its prefill: CTX no longer overlaps the two"},
	}
}()

// BlockingCost is one job's figures, fixed and with the replay.
type BlockingCost struct {
	Job                     BlockingJob
	Good, Bad               float64 // throughput, requests/s
	GoodTTFT, BadTTFT       float64 // TTFT p50, ms
	GoodPollMax, BadPollMax float64 // the longest local poll of a status check, ms
}

// Blocking15139 runs each of BlockingJobs fixed and with the
// blocking-outcomes replay.
func Blocking15139() ([]BlockingCost, error) {
	var out []BlockingCost
	for _, j := range BlockingJobs {
		good, _, err := runspec.SimulateLine(j.Args, false)
		if err != nil {
			return nil, err
		}
		bad, _, err := runspec.SimulateLine(j.Args+" --replay "+string(executor.BlockingOutcomes), false)
		if err != nil {
			return nil, err
		}
		if !good.OK() || !bad.OK() {
			return nil, fmt.Errorf("%s: a run failed: fixed %v, replay %v", j.Name, good.Errors, bad.Errors)
		}
		pollMax := func(r *executor.Report) float64 {
			v := 0.0
			for _, in := range r.Instances {
				v = max(v, in.MaxPollWaitMs)
			}
			return v
		}
		out = append(out, BlockingCost{Job: j, Good: good.ThroughputRPS, Bad: bad.ThroughputRPS, GoodTTFT: good.TTFTMs.P50, BadTTFT: bad.TTFTMs.P50,
			GoodPollMax: pollMax(good), BadPollMax: pollMax(bad)})
	}
	return out, nil
}

// Row is one row of a seed's table: the seed's good and bad figures
// and the run's.
type Row struct {
	What               string
	Unit               string
	SeedGood, SeedBad  float64
	Good, Bad          float64
	Why                string // what the model leaves out, where the figures differ
	ChangeOnly         bool   // only the relative change is published (and compared)
	SeedChange, Change float64
}

// genIdleWait is the longest a GEN group waited, between finishing one
// request and the next request's KV arriving (con1: the next request
// arrives when the previous finishes), in ms.
func genIdleWait(recs []executor.RequestRecord) float64 {
	w := 0.0
	for i := 1; i < len(recs); i++ {
		w = max(w, float64(recs[i].TransferDone-recs[i-1].Done)/1e6)
	}
	return w
}

// Seed000Table runs Seed000Job fixed and with the unclamped-poll replay.
func Seed000Table() ([]Row, error) {
	good, goodRecs, err := runspec.SimulateLine(Seed000Job, true)
	if err != nil {
		return nil, err
	}
	bad, badRecs, err := runspec.SimulateLine(Seed000Job+" --replay unclamped-poll", true)
	if err != nil {
		return nil, err
	}
	tput := func(r *executor.Report) float64 { return float64(r.RequestsCompleted) * (8192 + 1024) / r.CompletionS }
	// Into its 1 s sleep the CTX was when the delayed request arrived: the
	// handover waited the rest.
	into := 1 - (genIdleWait(badRecs)-genIdleWait(goodRecs))/1e3
	rows := []Row{
		{What: "CTX post-prefill idle iteration host step (max)", Unit: "ms", SeedGood: 210, SeedBad: 1151, Good: good.IdleStepMs.Max, Bad: bad.IdleStepMs.Max,
			Why: "the sim gives host work no time (good: the idle iteration's collectives, microseconds, not 210 ms); the extra is one sender wait slice (1000 ms) in both"},
		{What: "GEN idle wait before the next request's KV (max)", Unit: "ms", SeedGood: 480, SeedBad: 1457, Good: genIdleWait(goodRecs), Bad: genIdleWait(badRecs),
			Why: "good: the next request's prefill (8k tokens on one attention-DP rank) and transfer only, with no host time; bad adds what is left of the CTX's interval when the request arrives"},
		{What: "benchmark duration", Unit: "s", SeedGood: 2.46, SeedBad: 3.31, Good: good.CompletionS, Bad: bad.CompletionS,
			Why: fmt.Sprintf("two requests; the first meets no sleep (no send has happened yet), the second waits out the rest of an interval; "+
				"longer than the seed's because MTP is not modelled: each of 1024 tokens is a decode step of %.2f ms", good.TPOTMs.P50)},
		{What: "total token throughput", Unit: "%", ChangeOnly: true, SeedChange: -27.7, Change: 100 * (tput(bad)/tput(good) - 1),
			Why: fmt.Sprintf("the change follows from the duration's: per handover the replay costs what is left of the CTX's 1 s interval when the request arrives "+
				"(here the previous decode ends %.2f s into a sleep; the seed's +977 ms says its arrivals met a sleep at its start); "+
				"the same delay on the seed's 2.46 s benchmark would be %.1f%%", into, 100*(2.46/(2.46+(bad.CompletionS-good.CompletionS))-1))},
	}
	for i := range rows {
		r := &rows[i]
		if !r.ChangeOnly && r.SeedGood > 0 {
			r.SeedChange = 100 * (r.SeedBad/r.SeedGood - 1)
		}
		if !r.ChangeOnly && r.Good > 0 {
			r.Change = 100 * (r.Bad/r.Good - 1)
		}
	}
	return rows, nil
}

// Seed001Stall runs Seed001Job with the no-idle-reap replay and returns the
// CTX pool's use when the run stalled (the seed: 99.9%) and the stall.
func Seed001Stall() (float64, string, error) {
	rep, _, err := runspec.SimulateLine(Seed001Job+" --replay no-idle-reap", false)
	if err != nil {
		return 0, "", err
	}
	if rep.Error == nil {
		return 0, "", fmt.Errorf("seed 001's job with --replay no-idle-reap did not stall")
	}
	m := regexp.MustCompile(`KV pool (\d+)/(\d+) blocks used`).FindStringSubmatch(rep.Error.Message)
	if m == nil {
		return 0, rep.Error.Message, fmt.Errorf("seed 001's stall names no pool use: %s", rep.Error.Message)
	}
	used, _ := strconv.Atoi(m[1])
	total, _ := strconv.Atoi(m[2])
	return float64(used) / float64(total), rep.Error.Message, nil
}

// Rows adds the seeds' tables to rankrun bench: each row the run's
// change from good to bad beside the seed's.
func Rows(with001 bool, add func(benchtab.Row), missing func(string, error)) {
	rows, err := Seed000Table()
	if err != nil {
		missing("seed 000's table", err)
	} else {
		const sec = "seed 000's table in virtual time (its job: DeepSeek-R1 FP4 on GB200, ctx dp=4,ep=4,adp -> gen tp=8,ep=8, 8k/1k, con1, no MTP; fixed vs --replay unclamped-poll)"
		for _, r := range rows {
			b := benchtab.Row{Section: sec, Figure: r.What + ": bad - good", Unit: r.Unit, Reference: "seed 000"}
			if r.ChangeOnly {
				b.Figure, b.Value, b.RefValue = r.What+": change", r.Change, r.SeedChange
			} else {
				b.Value, b.RefValue = r.Bad-r.Good, r.SeedBad-r.SeedGood
				r.Why = fmt.Sprintf("run %s -> %s, seed %s -> %s; %s", fmtFig(r.Good), fmtFig(r.Bad), fmtFig(r.SeedGood), fmtFig(r.SeedBad), r.Why)
			}
			b.Note = r.Why
			add(benchtab.RatioRow(b))
		}
	}
	costs, err := Blocking15139()
	if err != nil {
		missing("the #15139 shape", err)
	} else {
		const sec = "TensorRT-LLM #15139's shape in virtual time (fixed vs --replay blocking-outcomes)"
		for _, c := range costs {
			// No reference ratio: #15139's 817/1573 came from PP stage skew,
			// a mechanism these runs do not have (see BlockingJob).
			add(benchtab.RatioRow(benchtab.Row{Section: sec, Figure: c.Job.Name + ": throughput, replay / fixed", Value: c.Bad / c.Good, Unit: "x",
				Reference: "fixed build, same run",
				Note: fmt.Sprintf("%.1f -> %.1f requests/s, TTFT p50 %.2f -> %.2f ms, longest poll %.2f -> %.2f ms; %s (#15139 measured 817/1573 tokens/s from CTX PP stage skew, not modelled)",
					c.Good, c.Bad, c.GoodTTFT, c.BadTTFT, c.GoodPollMax, c.BadPollMax, c.Job.Why)}))
		}
	}
	if !with001 {
		return
	}
	use, _, err := Seed001Stall()
	if err != nil {
		missing("seed 001's stall", err)
		return
	}
	add(benchtab.RatioRow(benchtab.Row{Section: "seed 001's stall in virtual time (its job, --replay no-idle-reap)", Figure: "CTX KV pool use when admission stopped",
		Value: 100 * use, Unit: "%", Reference: "seed 001", RefValue: 99.9, Note: "the run stalls (ErrStalled) with the completed sends pinned, as the seed's CTX did"}))
}

// fmtFig is a figure in six significant digits, as the perf suite's.
func fmtFig(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
