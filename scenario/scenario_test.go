package scenario_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/scenario"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const good = `# a comment
name: example   # trailing comment
ctx: tp=1   gen: tp=4	transfer: sync
requests: 24   input: 64   output: 2   arrival: closed=8
ctx-blocks: 16   gen-blocks: 64
stall-timeout: 1s
fault: fail-transfer@gen:1,req=3
replay-under-test: no-idle-reap
expect: ok
expect: completed == 23
expect: idle-step-p50 < 100ms
expect: bytes-verified == bytes-moved
expect-with-replay: error ErrStalled|ErrDesync within 10s
expect-with-replay: message contains "pinned # not a comment"
`

func TestParse(t *testing.T) {
	s, err := scenario.Parse("good.txt", strings.NewReader(good))
	require.NoError(t, err)
	require.Equal(t, "example", s.Name)
	require.Equal(t, "tp=4", s.Gen)
	require.Equal(t, "sync", s.Transfer)
	require.Equal(t, 24, s.Requests)
	require.Equal(t, "closed=8", s.Arrival)
	require.Equal(t, time.Second, s.StallTimeout)
	require.Equal(t, []string{"fail-transfer@gen:1,req=3"}, s.Faults)
	require.Equal(t, executor.NoIdleReap, s.ReplayUnderTest)
	require.True(t, s.Expect.OK)
	require.Len(t, s.Expect.Bounds, 3)
	require.Equal(t, []string{"ErrStalled", "ErrDesync"}, s.ExpectWithReplay.Errors)
	require.Equal(t, 10*time.Second, s.ExpectWithReplay.Within)
	require.Equal(t, []string{"pinned # not a comment"}, s.ExpectWithReplay.Contains)
	require.Equal(t, 5, s.Ranks())

	// Format round-trips.
	again, err := scenario.Parse("again.txt", strings.NewReader(s.Format()))
	require.NoError(t, err, s.Format())
	require.Equal(t, s.RunArgs(true), again.RunArgs(true))
	require.Equal(t, s.Format(), again.Format())

	cfg, err := s.Config(true)
	require.NoError(t, err)
	require.True(t, cfg.Replays.On(executor.NoIdleReap))
	cfg, err = s.Config(false)
	require.NoError(t, err)
	require.False(t, cfg.Replays.On(executor.NoIdleReap))
	require.Contains(t, s.CommandLine(true), "rankrun run --ctx tp=1 --gen tp=4 --transfer sync")
	require.Contains(t, s.CommandLine(true), "--replay no-idle-reap --fault fail-transfer@gen:1,req=3")
}

func TestParseErrors(t *testing.T) {
	base := "name: x\nctx: tp=1\ngen: tp=1\nexpect: ok\n"
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"unknown key", base + "colour: red\n", []string{"bad.txt:5", `unknown key "colour"`, "valid keys are", "arrival", "replay-under-test"}},
		{"no colon", base + "requests 4\n", []string{"bad.txt:5", "want key: value"}},
		{"unknown replay", base + "replay: no-such\n", []string{"bad.txt:5", "valid replays are unclamped-poll, no-idle-reap"}},
		{"unknown fault", base + "fault: explode@gen:0,req=1\n", []string{"bad.txt:5", "valid faults are fail-transfer"}},
		{"bad layout", "name: x\nctx: tp=0\n", []string{"bad.txt:2", "ctx:"}},
		{"ep without a model", "name: x\nctx: tp=1\ngen: tp=2,ep=2\nexpect: ok\n", []string{"bad.txt:3", "gen:", "ep needs a mixture-of-experts model", "experts: E/K"}},
		{"experts not E/K", "name: x\nctx: tp=1\ngen: tp=2,ep=2\nexperts: 8/x\nexpect: ok\n", []string{"bad.txt:4", "experts:", "want E/K"}},
		{"bad duration", base + "stall-timeout: soon\n", []string{"bad.txt:5", "stall-timeout", "duration"}},
		{"bad int", base + "requests: -3\n", []string{"bad.txt:5", "requests"}},
		{"repeated key", base + "ctx: tp=2\n", []string{"bad.txt:5", `key "ctx" repeated (first on line 2)`}},
		{"missing name", "ctx: tp=1\ngen: tp=1\nexpect: ok\n", []string{`missing key "name"`}},
		{"missing expect", "name: x\nctx: tp=1\ngen: tp=1\n", []string{`missing key "expect"`}},
		{"unknown error", "name: x\nctx: tp=1\ngen: tp=1\nexpect: error ErrOops\n", []string{"bad.txt:4", `unknown error "ErrOops"`, "ErrStalled"}},
		{"unknown figure", base + "expect: speed > 3\n", []string{"bad.txt:5", `unknown figure "speed"`, "ttft-p50"}},
		{"ms figure needs a duration", base + "expect: ttft-p50 < 3\n", []string{"bad.txt:5", "duration"}},
		{"mixed units", base + "expect: ttft-p50 < completed\n", []string{"not in the same unit"}},
		{"ok and error", base + "expect: error ErrStalled\n", []string{"both ok and error"}},
		{"bound on error", "name: x\nctx: tp=1\ngen: tp=1\nexpect: error ErrStalled\nexpect: completed == 1\n", []string{"on a run expected to fail"}},
		{"with-replay without replay", base + "expect-with-replay: ok\n", []string{"needs replay-under-test", "valid replays"}},
		{"replay without with-replay", base + "replay-under-test: no-idle-reap\n", []string{"bad.txt:5", "needs expect-with-replay"}},
		{"invalid run", base + "fault: exit@gen:3,req=1\n", []string{"bad.txt:5: the run it describes is invalid: fault exit@gen:3,req=1", "rank 3 outside"}},
		// The run's rules are the command line's (runspec), each error at
		// the line of the key it names.
		{"chunked without a budget", base + "chunked: true\nrequests: 4\n", []string{"bad.txt:5: the run it describes is invalid: chunked", "needs a token budget"}},
		{"arrivals past the span", base + "requests: 16\narrival: poisson=0.0000001\n", []string{"bad.txt:6: the run it describes is invalid: arrival poisson=1e-07", "the rate must be at least"}},
		{"bad quote", base + "expect: message contains never\n", []string{"double-quoted"}},
		{"pool past int32", base + "ctx-blocks: 4000000000\n", []string{"bad.txt:5", "ctx-blocks", "at most 2147483647"}},
		{"trace with input", base + "arrival: trace=../traces/AzureLLMInferenceTrace_code.csv\ninput: 5\n", []string{"bad.txt:6", "input: a trace's lengths are its own"}},
		{"trace missing", base + "arrival: trace=nowhere.csv\n", []string{"bad.txt:5", "arrival:", "nowhere.csv"}},
		{"trace window too small", base + "arrival: trace=../traces/AzureLLMInferenceTrace_code.csv:span=1s\nrequests: 30\n", []string{"fewer than the 30 asked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scenario.Parse("bad.txt", strings.NewReader(tc.text))
			require.ErrorIs(t, err, scenario.ErrParse)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// A run that outlives its deadline is reported as a hang naming the
// scenario, and Run returns (it never hangs itself).
func TestRunReportsHang(t *testing.T) {
	s := scenario.New("stalls for longer than its own deadline")
	s.Ctx, s.Gen, s.Requests = "tp=1", "tp=2", 4
	s.Faults = []string{"stall@gen:1,req=1,for=1m"}
	s.CollectiveTimeout = time.Minute
	s.Timeout = 300 * time.Millisecond
	require.NoError(t, s.Expect.Add("ok"))
	start := time.Now()
	r := scenario.Run(context.Background(), s)
	require.Less(t, time.Since(start), 15*time.Second)
	require.False(t, r.Pass)
	require.True(t, r.Hung())
	require.Contains(t, r.String(), "FAIL stalls for longer than its own deadline")
	require.Contains(t, r.Reason, "hang: no result within 300ms")
	require.Contains(t, r.Reason, "reproduce: rankrun run")
}

func TestRunChecksOutcome(t *testing.T) {
	s := scenario.New("small run")
	s.Gen, s.Requests = "tp=2", 4
	require.NoError(t, s.Expect.Add("ok"))
	require.NoError(t, s.Expect.Add("completed == 4"))
	r := scenario.Run(context.Background(), s)
	require.True(t, r.Pass, r.Reason)

	// A wrong expectation fails and says what was measured.
	require.NoError(t, s.Expect.Add("completed == 5"))
	r = scenario.Run(context.Background(), s)
	require.False(t, r.Pass)
	require.Contains(t, r.Reason, "completed == 5: got 4")

	// An error expected where the run completes.
	s.Expect = scenario.Expectation{}
	require.NoError(t, s.Expect.Add("error ErrStalled within 1s"))
	r = scenario.Run(context.Background(), s)
	require.False(t, r.Pass)
	require.Contains(t, r.Reason, "expected error ErrStalled, but the run completed")
}

func FuzzParse(f *testing.F) {
	f.Add(good)
	f.Add("name: x\nctx: tp=1\ngen: tp=1\nexpect: ok\n")
	f.Add("expect: ttft-p50 <= ttft-max  expect: error ErrDesync|ErrBroken within 1s\n")
	f.Add("name: c\nctx: tp=1\ngen: tp=1\nmax-tokens: 16  chunked: true\nexpect: ok\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := scenario.Parse("fuzz.txt", strings.NewReader(text))
		if err != nil {
			require.ErrorIs(t, err, scenario.ErrParse)
			require.Contains(t, err.Error(), "fuzz.txt")
			return
		}
		// Whatever parses renders back to the same scenario.
		again, err := scenario.Parse("again.txt", strings.NewReader(s.Format()))
		require.NoError(t, err, s.Format())
		require.Equal(t, s.RunArgs(true), again.RunArgs(true))
	})
}

// Pairs on one line are separated by two spaces or a tab; one space is a
// clear error naming the file, the line, both keys and the rule.
func TestParsePairSeparator(t *testing.T) {
	const head = "name: x\nexpect: ok\n"
	for _, sep := range []string{"  ", "\t", " \t", "   "} {
		s, err := scenario.Parse("t.txt", strings.NewReader(head+"ctx: tp=2"+sep+"gen: tp=4\n"))
		require.NoError(t, err, "%q", sep)
		require.Equal(t, "tp=2", s.Ctx)
		require.Equal(t, "tp=4", s.Gen)
	}
	_, err := scenario.Parse("t.txt", strings.NewReader(head+"ctx: tp=2 gen: tp=4\n"))
	require.Error(t, err)
	require.Contains(t, err.Error(), "t.txt:3: ctx:")
	require.Contains(t, err.Error(), `another key "gen:"`)
	require.Contains(t, err.Error(), "two spaces or a tab")
	// A colon inside a quoted value is not a key.
	_, err = scenario.Parse("t.txt", strings.NewReader("name: x\nctx: tp=1  gen: tp=1\nexpect: error ErrStalled\nexpect: message contains \"a gen: b\"\n"))
	require.NoError(t, err)
}

// In simulation wall time decides no verdict: a run stopped at the wall
// limit is the host giving up, reported as such, never a hang (a
// run that needed 0.02 s of virtual time was reported "hang: no result
// within 1s" after 16 s of wall time).
func TestSimWallLimitIsTheHostGivingUpNotAHang(t *testing.T) {
	s := scenario.New("a run longer in wall time than its limit")
	s.Ctx, s.Gen, s.Requests, s.Arrival = "tp=1", "tp=4", 400, "burst"
	s.CtxBlocks, s.GenBlocks = 1024, 1024
	s.Timeout = time.Second // virtual: the run needs far less
	require.NoError(t, s.Expect.Add("ok"))
	r := scenario.Run(context.Background(), s, scenario.WithBackend("sim"), scenario.WithWallLimit(time.Millisecond))
	require.False(t, r.Pass)
	require.False(t, r.Hung(), "the host giving up is not a hang: %s", r)
	require.True(t, r.HostGaveUp(), "%s", r)
	require.Contains(t, r.Reason, "the host gave up after 1ms of wall time before the simulated run ended")
	require.NotContains(t, r.Reason, "hang")
	// Without the limit the same run passes: its virtual deadline is what
	// decides.
	r = scenario.Run(context.Background(), s, scenario.WithBackend("sim"))
	require.True(t, r.Pass, "%s", r)
}

// A fault goes on the rank of its position class: the first, a middle and
// the last rank of the replica that holds the request, world rank 0; a
// fault on sent bytes counts only the ranks that send (under attention-DP
// one TP index of each replica), and a position a layout lacks is refused.
func TestInjectFaultPlacesEachPosition(t *testing.T) {
	for _, tc := range []struct {
		ctx, gen, spec, pos string
		want                string // the fault's KIND@ROLE:RANK, "" when refused
	}{
		{"tp=4", "tp=1", "stall-short@ctx", "first", "stall@ctx:0"},
		{"tp=4", "tp=1", "stall-short@ctx", "middle", "stall@ctx:2"},
		{"tp=4", "tp=1", "stall-short@ctx", "last", "stall@ctx:3"},
		{"tp=4", "tp=1", "stall-short@ctx", "world0", "stall@ctx:0"},
		{"tp=1", "tp=2", "fail-transfer@gen", "last", "fail-transfer@gen:1"},
		{"tp=1", "tp=2", "fail-transfer@gen", "middle", ""}, // a replica of 2 has no middle
		{"tp=1", "tp=2", "exit@gen", "world0", ""},          // world rank 0 is a CTX rank
		{"tp=1", "tp=8", "delay@gen", "last", "delay@gen:7"},
		{"tp=1", "tp=8", "shrink-pool@gen", "middle", "shrink-pool@gen:4"},
		// Attention-DP: ranks 2k send, 2k+1 hold duplicates; the request
		// decides the replica, so compare the TP index only below.
		{"tp=2,dp=2,adp", "tp=1", "corrupt@ctx", "last", "corrupt@ctx:even"},
		{"tp=2,dp=2,adp", "tp=1", "stall-short@ctx", "last", "stall@ctx:odd"},
	} {
		t.Run(tc.ctx+"/"+tc.gen+"/"+tc.spec+"/"+tc.pos, func(t *testing.T) {
			s := scenario.New("placement")
			s.Ctx, s.Gen, s.Requests = tc.ctx, tc.gen, 8
			ok, err := s.InjectFault(tc.spec, tc.pos, rand.New(rand.NewPCG(3, 4)))
			require.NoError(t, err)
			if tc.want == "" {
				require.False(t, ok, "placed %v", s.Faults)
				return
			}
			require.True(t, ok)
			got, _, _ := strings.Cut(s.Faults[0], ",")
			switch {
			case strings.HasSuffix(tc.want, ":even"), strings.HasSuffix(tc.want, ":odd"):
				prefix, parity, _ := strings.Cut(tc.want, ":")
				kind, rank, _ := strings.Cut(got, ":")
				require.Equal(t, prefix, kind)
				r, err := strconv.Atoi(rank)
				require.NoError(t, err)
				require.Equal(t, parity == "odd", r%2 == 1, "rank %d", r)
			default:
				require.Equal(t, tc.want, got)
			}
		})
	}
}

// The step scheduler's keys reach the run in process and under mpirun
// alike: a scenario's default is no limit, given to the CLI explicitly
// (whose own defaults are a serving engine's).
func TestSchedulerKeys(t *testing.T) {
	s, err := scenario.Parse("s.txt", strings.NewReader("name: sched\nctx: tp=1   gen: tp=1\nmax-batch: 3   max-tokens: 100\nexpect: ok\n"))
	require.NoError(t, err)
	cfg, err := s.Config(false)
	require.NoError(t, err)
	require.Equal(t, 3, cfg.MaxBatch)
	require.Equal(t, 100, cfg.MaxTokens)
	args := strings.Join(s.RunArgs(false), " ")
	require.Contains(t, args, "--max-batch 3 --max-tokens 100")
	plain, err := scenario.Parse("p.txt", strings.NewReader("name: plain\nctx: tp=1   gen: tp=1\nexpect: ok\n"))
	require.NoError(t, err)
	require.Contains(t, strings.Join(plain.RunArgs(false), " "), "--max-batch 0 --max-tokens 0")
	_, err = scenario.Parse("bad.txt", strings.NewReader("name: bad\nctx: tp=1   gen: tp=1\nmax-batch: -1\nexpect: ok\n"))
	require.ErrorContains(t, err, "max-batch")

	// chunked: chunked prefill, in the config and the command line.
	ch, err := scenario.Parse("c.txt", strings.NewReader("name: chunked\nctx: tp=1   gen: tp=1\nmax-tokens: 16   chunked: true\nexpect: ok\n"))
	require.NoError(t, err)
	cfg, err = ch.Config(false)
	require.NoError(t, err)
	require.True(t, cfg.ChunkedPrefill)
	require.Contains(t, strings.Join(ch.RunArgs(false), " "), "--max-tokens 16 --chunked")
	require.NotContains(t, args, "--chunked")
	again, err := scenario.Parse("again.txt", strings.NewReader(ch.Format()))
	require.NoError(t, err, "a chunked scenario renders back: %s", ch.Format())
	require.Equal(t, ch.RunArgs(true), again.RunArgs(true))
	_, err = scenario.Parse("bad.txt", strings.NewReader("name: bad\nctx: tp=1   gen: tp=1\nchunked: maybe\nexpect: ok\n"))
	require.ErrorContains(t, err, "chunked")
}
