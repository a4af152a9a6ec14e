package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Every input of the list: exit 2, one line naming the flag and
// the rule, nothing on stdout.
func TestRunOneRuleForEveryInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"NaN rate", []string{"--arrival", "rate=NaN"}, []string{"--arrival", "rate=NaN", "(0, 1e7]"}},
		{"NaN poisson", []string{"--arrival", "poisson=NaN"}, []string{"--arrival", "poisson=NaN"}},
		{"Inf rate", []string{"--arrival", "rate=+Inf"}, []string{"--arrival", "rate=+Inf"}},
		{"NaN jitter", []string{"--input-jitter", "NaN"}, []string{"--input-jitter NaN", "[0, 1)"}},
		{"Inf jitter", []string{"--input-jitter", "Inf"}, []string{"--input-jitter +Inf"}},
		{"world too large", []string{"--ctx", "tp=1000000"}, []string{"--ctx tp=1000000", "1000004 ranks", "at most 4096"}},
		{"huge ctx pool", []string{"--ctx-blocks", "100000000"}, []string{"--ctx-blocks 100000000", "limit"}},
		{"pool beyond the host", []string{"--gen-blocks", "1000000"}, []string{"--gen-blocks 1000000", "memory"}},
		{"negative slice", []string{"--sender-wait-slice", "-5s"}, []string{"--sender-wait-slice -5s", "positive"}},
		{"zero slice", []string{"--sender-wait-slice", "0"}, []string{"--sender-wait-slice 0s", "positive"}},
		{"zero gen poll", []string{"--gen-poll-interval", "0"}, []string{"--gen-poll-interval"}},
		{"negative transfer timeout", []string{"--transfer-timeout", "-1s"}, []string{"--transfer-timeout"}},
		{"zero idle tick", []string{"--idle-tick", "0"}, []string{"--idle-tick"}},
		{"negative stall timeout", []string{"--stall-timeout", "-1ms"}, []string{"--stall-timeout"}},
		{"zero timeout", []string{"--timeout", "0"}, []string{"--timeout 0s"}},
		{"zero collective timeout", []string{"--collective-timeout", "0"}, []string{"--collective-timeout"}},
		{"negative prefill", []string{"--prefill-per-token", "-1us"}, []string{"--prefill-per-token", "negative"}},
		{"negative decode", []string{"--decode-per-step", "-1us"}, []string{"--decode-per-step"}},
		{"negative jitter", []string{"--msg-jitter", "-1us"}, []string{"--msg-jitter"}},
		{"zero ctx blocks", []string{"--ctx-blocks", "0"}, []string{"--ctx-blocks 0", "at least 1"}},
		{"negative max batch", []string{"--max-batch", "-1"}, []string{"--max-batch -1", "not be negative"}},
		{"negative max tokens", []string{"--max-tokens", "-2"}, []string{"--max-tokens -2", "not be negative"}},
		{"chunked without a budget", []string{"--chunked", "--max-tokens", "0"}, []string{"--chunked", "--max-tokens 0", "token budget"}},
		{"zero layers", []string{"--layers", "0"}, []string{"--layers 0"}},
		// Named by the flag, not the Go field (it said "HeadDim must be at
		// most 65536").
		{"head dim past its limit", []string{"--head-dim", "100000000"}, []string{"--head-dim 100000000: must be in [1, 65536]"}},
		{"zero requests", []string{"--requests", "0"}, []string{"--requests 0"}},
		{"empty transfer", []string{"--transfer", ""}, []string{`--transfer ""`, "async or sync"}},
		{"bad verify", []string{"--verify", "crc"}, []string{"--verify", `"crc"`, "full, checksum or off"}},
		{"checked and unchecked", []string{"--checked", "--unchecked"}, []string{"--checked and --unchecked", "give one"}},
		{"arrival list", []string{"--arrival", "closed=1,,closed=2"}, []string{"--arrival", "one pattern"}},
		{"empty replay item", []string{"--replay", "unclamped-poll,,no-idle-reap"}, []string{"--replay", "empty"}},
		{"empty fault option", []string{"--fault", "fail-transfer@gen:1,req=3,"}, []string{"--fault", "empty option"}},
		{"empty layout item", []string{"--ctx", "tp=2,,pp=2"}, []string{"--ctx", "empty"}},
		{"duplicate fault option", []string{"--fault", "fail-transfer@gen:1,req=3,req=4"}, []string{"--fault", "req= given twice"}},
		{"inapplicable for=", []string{"--fault", "fail-transfer@gen:1,req=3,for=2s"}, []string{"--fault", "for= does not apply to fail-transfer"}},
		{"inapplicable blocks=", []string{"--fault", "stall@gen:1,req=1,for=1s,blocks=3"}, []string{"blocks= does not apply to stall"}},
		{"inapplicable req=", []string{"--fault", "delay@gen:1,req=2,for=1ms"}, []string{"req= does not apply to delay"}},
		{"req is required", []string{"--fault", "stall@gen:1,for=2s"}, []string{"--fault stall@gen:1,for=2s", "req=N is required"}},
		{"shrink larger than the pool", []string{"--fault", "shrink-pool@gen:1,blocks=100000"}, []string{"blocks=100000", "larger than the gen pool of 512"}},
		{"shrink names the stalled rank", []string{"--fault", "shrink-pool@gen:1,blocks=2"}, []string{"gen rank 1", "never be admitted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, append([]string{"run", "--requests", "4"}, tc.args...)...)
			oneLine(t, code, out, errOut, tc.want...)
		})
	}
}

// -h says what 0 means for every duration and count, or that it is refused.
func TestRunHelpSaysWhatZeroMeans(t *testing.T) {
	_, _, help := cli(t, "run", "-h")
	for _, flag := range []string{"layers", "kv-heads", "head-dim", "tokens-per-block", "elem-bytes", "requests", "input", "input-jitter",
		"output", "prefill-per-token", "decode-per-step", "ctx-blocks", "gen-blocks", "sender-wait-slice", "gen-poll-interval",
		"transfer-timeout", "idle-tick", "stall-timeout", "collective-timeout", "timeout", "schedule-seed", "pct-depth", "msg-jitter", "ranks", "seed"} {
		i := strings.Index(help, "\n  -"+flag+" ")
		if !assert.GreaterOrEqual(t, i, 0, "-%s in -h", flag) {
			continue
		}
		entry := help[i+1:]
		if j := strings.Index(entry[1:], "\n  -"); j >= 0 {
			entry = entry[:j+1]
		}
		assert.True(t, strings.Contains(entry, "0:") || strings.Contains(entry, "(> 0)") || strings.Contains(entry, ">= 1") ||
			strings.Contains(entry, "0 included") || strings.Contains(entry, "[0,1)"), "-%s: -h does not say what 0 means:\n%s", flag, entry)
	}
}

// The other commands' counts too (the README says -h gives what 0 means
// for every duration and count): these said nothing of it.
func TestHelpSaysWhatZeroMeansEverywhere(t *testing.T) {
	for cmd, flags := range map[string][]string{
		"devices": {"layers", "kv-heads", "head-dim", "tokens-per-block", "elem-bytes"},
		"explore": {"seeds", "start"},
		"sweep":   {"repeat"},
		"bench":   {"handover-requests", "seed-requests", "cp-requests"},
	} {
		_, _, help := cli(t, cmd, "-h")
		for _, flag := range flags {
			i := strings.Index(help, "\n  -"+flag+" ")
			if !assert.GreaterOrEqual(t, i, 0, "%s -%s in -h", cmd, flag) {
				continue
			}
			entry := help[i+1:]
			if j := strings.Index(entry[1:], "\n  -"); j >= 0 {
				entry = entry[:j+1]
			}
			assert.Contains(t, entry, ">= 1", "%s -%s: -h does not say what 0 means:\n%s", cmd, flag, entry)
		}
	}
}

// Under mpirun a refusal every rank reaches alike is printed once, by
// world rank 0; the others exit with the same code, silently.
func TestRefusalPrintedOnceUnderMPI(t *testing.T) {
	// No mpirun ends a quiet rank here: it waits out its bound, which is
	// shortened (it was 60 s of this package's time under -race).
	defer func(b time.Duration) { quietExitBound = b }(quietExitBound)
	quietExitBound = 300 * time.Millisecond
	for _, rank := range []string{"0", "3"} {
		t.Run("world rank "+rank, func(t *testing.T) {
			t.Setenv("OMPI_COMM_WORLD_SIZE", "5")
			t.Setenv("OMPI_COMM_WORLD_RANK", rank)
			for _, args := range [][]string{{"run", "--requests", "0"}, {"run", "--backend", "local"}} {
				start := time.Now()
				code, out, errOut := cli(t, args...)
				if rank != "0" {
					// It leaves last: world rank 0's line goes out before
					// mpirun sees a rank end.
					assert.GreaterOrEqual(t, time.Since(start), quietExitBound, "%v: rank %s waited for mpirun to end the job", args, rank)
				}
				assert.NotZero(t, code, "%v", args)
				assert.Empty(t, out)
				if rank == "0" {
					assert.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line from rank 0:\n%s", args, errOut)
				} else {
					assert.Empty(t, errOut, "%v: rank %s prints nothing", args, rank)
				}
			}
		})
	}
}
