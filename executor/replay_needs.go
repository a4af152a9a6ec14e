package executor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// A replay brings its bug back only where the bug's code path runs: a
// transfer mode, a layout, a fault, a pool that fills. On a run without
// them the replay is switched on and nothing happens, which reads as a
// pass. replayShows says, for each replay, what a run needs for its bug to
// show (sound: a run that lacks one of them cannot show it) and the flags
// of a run that does show it (tested, in simulation).
type replayShow struct {
	needs   func(c *Config) []string // what c lacks, each as the flag or fact to change
	example string                   // rankrun run flags of a run that shows the bug
	symptom string                   // what the bug looks like there
	// timeNote, for a replay whose bug shows as time (TimeReplays), is
	// what ReplayNotes says of it before the symptom.
	timeNote string
}

var replayShows = map[Replay]replayShow{
	UnclampedPoll: {
		needs: func(c *Config) []string {
			return need(c.Mode == transceiver.Async, "--transfer async (the clamp is in the async CTX's idle status check)")
		},
		example: "--backend sim --ctx tp=1 --gen tp=1 --requests 8 --input 64 --output 2 --arrival closed=1 " +
			"--decode-per-step 5ms --idle-tick 2ms --sender-wait-slice 100ms",
		symptom:  "the idle host step (ctx) and max poll wait grow to --sender-wait-slice, and TTFT with them",
		timeNote: "fails no run; its bug shows as time",
	},
	NoIdleReap: {
		// Both of its rows are sync CTX's: no idle reap (single rank) and no
		// coordinated reap or drain (any group). With no drain a sync run
		// never ends clean, whatever the pool: it stalls when the pool
		// fills, else its sends stay pinned at the end.
		needs: func(c *Config) []string {
			return need(c.Mode == transceiver.Sync, "--transfer sync (async CTX ranks reap every iteration)")
		},
		example: "--backend sim --ctx tp=1 --gen tp=4 --transfer sync --requests 24 --input 64 --output 2 --arrival closed=8 " +
			"--ctx-blocks 16 --gen-blocks 64 --stall-timeout 1s",
		symptom: "ErrStalled: completed sends pin the CTX pool until admission stops (with a pool the workload cannot fill, the sends stay pinned and the run never drains)",
	},
	UnsafeIdleReap: {
		needs: func(c *Config) []string {
			return need(c.Mode == transceiver.Sync, "--transfer sync (the guard is the sync GEN's)",
				c.Gen.AttentionDP && c.Gen.DP > 1, "GEN attention-DP, dp=2 or more with adp (only then do the ranks of one GEN group hold different requests)")
		},
		example: "--backend sim --ctx tp=1 --gen dp=2,adp --transfer sync --requests 8 --input 64 --output 2 --arrival closed=1 --collective-timeout 2s",
		symptom: "ErrDesync or ErrCollectiveTimeout: an idle GEN rank enters the status check while a peer receives",
	},
	LocalAdmissionGate: {
		needs: func(c *Config) []string {
			uneven := c.Ctx.CP > 1 || c.Ctx.AttentionDP || slices.ContainsFunc(c.Faults, func(f Fault) bool {
				return f.Kind == FaultShrinkPool && f.Role == topology.Context
			})
			return need(execGroup(c.Ctx) > 1, "a CTX executor group of 2+ ranks (tp, pp or cp above 1, or dp with adp)",
				uneven, "CTX ranks whose pools fill unevenly: --fault shrink-pool@ctx:N,blocks=B, cp above 1, or adp",
				c.poolCanFill(topology.Context), fmt.Sprintf("a CTX pool the workload can fill (%d requests of up to %d tokens fit in %d blocks, the smallest CTX pool)",
					c.Workload.Requests, c.Workload.maxTokens(), c.smallestPool(topology.Context)))
		},
		example: "--backend sim --ctx tp=2 --gen tp=2 --requests 24 --input 64 --output 2 --arrival closed=8 --ctx-blocks 64 --gen-blocks 64 " +
			"--fault shrink-pool@ctx:1,blocks=8 --collective-timeout 2s",
		symptom: "ErrDesync or ErrCollectiveTimeout: the full rank reaps while its peers agree on admission",
	},
	LocalErrorCollective: {
		needs: func(c *Config) []string {
			fails := slices.ContainsFunc(c.Faults, func(f Fault) bool {
				switch f.Kind {
				case FaultFailTransfer, FaultCorrupt, FaultTimeoutTransfer, FaultCancel:
					return true
				}
				return false
			})
			return need(execGroup(c.Gen) > 1, "a GEN executor group of 2+ ranks (tp, pp or cp above 1, or dp with adp)",
				fails, "a transfer that fails on a GEN rank: --fault fail-transfer@gen:N,req=R (or corrupt, timeout-transfer, cancel)")
		},
		example: "--backend sim --ctx tp=1 --gen tp=2 --requests 16 --input 64 --output 2 --arrival closed=4 " +
			"--fault fail-transfer@gen:1,req=3 --collective-timeout 2s",
		symptom: "ErrDesync or ErrCollectiveTimeout: the failing rank enters a collective of its own",
	},
	AdpEarlyOutcome: {
		needs: func(c *Config) []string {
			return need(c.Gen.AttentionDP && c.Gen.DP > 1 && c.Gen.ReplicaRanks() > 1,
				"GEN attention-DP with 2+ ranks per DP index (e.g. --gen tp=4,dp=2,adp): the early decision is between the TP siblings of one index")
		},
		example: "--backend sim --msg-jitter 20us --ctx tp=1 --gen tp=4,dp=2,adp --requests 16 --input 64 --output 2 --arrival closed=4 --collective-timeout 2s",
		symptom: "ErrPinned: blocks a sibling still receives into are released (it needs schedule jitter: --backend sim --msg-jitter)",
	},
	IdleMaxPoll: {
		needs: func(c *Config) []string {
			return need(c.Mode == transceiver.Async, "--transfer async (the idle flag's allreduce is in the async GEN's per-iteration status check)",
				c.Gen.AttentionDP && c.Gen.DP > 1, "GEN attention-DP, dp=2 or more with adp (only then can one rank of a GEN group be idle while another is busy)")
		},
		// One GEN DP index holds a receive wedged until its deadline while
		// the other is often idle (tests/multirank/testdata/replay-idle-max-poll.txt).
		example: "--backend sim --ctx tp=1 --gen dp=2,adp --requests 8 --input 64 --output 32 --arrival closed=4 --decode-per-step 1ms " +
			"--fault timeout-transfer@ctx:0,req=1 --transfer-timeout 2s --gen-poll-interval 200ms",
		symptom:  "max poll wait (gen) grows from 0 to --gen-poll-interval, and throughput falls: a busy GEN rank sleeps out its poll interval whenever another rank of its group is idle",
		timeNote: "its bug shows as time",
	},
	DeadlinesWhenBusy: {
		needs: func(c *Config) []string {
			stuck := slices.ContainsFunc(c.Faults, func(f Fault) bool {
				return f.Kind == FaultTimeoutTransfer || f.Kind == FaultDropAck || f.Kind == FaultStall
			})
			return need(stuck, "a transfer that never completes: --fault timeout-transfer@ctx:N,req=R (or drop-ack, or a stall); without one no deadline is ever needed")
		},
		// The last request's transfer is withheld: every rank is idle from
		// then on (tests/multirank/testdata/replay-deadlines-when-busy.txt).
		example: "--backend sim --ctx tp=1 --gen tp=2 --requests 4 --input 64 --output 4 --fault timeout-transfer@ctx:0,req=4 --transfer-timeout 2s --stall-timeout 2s",
		symptom: "ErrStalled: a transfer wedged while its ranks are idle is never cancelled at its transfer deadline; the stall detector names it at the deadline plus --stall-timeout (upstream, the run lasted until the harness's timeout)",
	},
	SilentStartFailure: {
		needs: func(c *Config) []string {
			return need(slices.ContainsFunc(c.Faults, func(f Fault) bool { return f.Kind == FaultFailSend }),
				"a transfer a CTX rank cannot start: --fault fail-send@ctx:N,req=R")
		},
		example:  "--backend sim --ctx tp=1 --gen tp=2 --requests 4 --input 64 --output 4 --fault fail-send@ctx:0,req=2 --transfer-timeout 2s --stall-timeout 2s",
		symptom:  "the GEN side waits for a transfer that never started until its deadline, holding the request's blocks: the request fails at the transfer deadline, not at once",
		timeNote: "its bug shows as time",
	},
	FillGateGather: {
		needs: func(c *Config) []string {
			return need(c.Gen.AttentionDP && c.Gen.DP > 1, "GEN attention-DP, dp=2 or more with adp (the fill state is attention-DP's, and only there do one group's ranks hold different requests)")
		},
		example: "--backend sim --ctx tp=1 --gen dp=2,adp --requests 8 --input 64 --output 8 --arrival closed=1",
		symptom: "ErrDesync: one rank gathers its fill state as bytes while a peer gathers it as int64 (checked mode names both call sites and both datatypes; unchecked, the payloads mismatch silently)",
	},
	QueueSizedCollective: {
		needs: func(c *Config) []string {
			return need(c.Mode == transceiver.Async, "--transfer async (the replay's collectives are the async GEN's per-iteration check)",
				execGroup(c.Gen) > 1, "a GEN group of 2 ranks or more (--gen tp=2, or dp=2,adp)")
		},
		// The GEN ranks' shards arrive apart (seeded jitter), so their
		// local queues differ in some iteration.
		example: "--backend sim --ctx tp=1 --gen tp=2 --requests 8 --input 64 --output 4 --arrival closed=1 --msg-jitter 20us --schedule-seed 1 --collective-timeout 2s",
		symptom: "ErrDesync or ErrCollectiveTimeout: a GEN rank whose shard arrived first reduces and checks while its peer, queue empty, skips both",
	},
	ZeroTokenSkip: {
		needs: func(c *Config) []string {
			return need(needsDispatch(c.Gen), "GEN attention-DP with ep (--gen dp=2,ep=2,adp and an MoE: --model, or --experts E/K)")
		},
		// One request at a time: in every step one DP index has no token.
		example: "--backend sim --ctx tp=1 --gen dp=2,ep=2,adp --experts 8/2 --requests 8 --input 64 --output 4 --arrival closed=1 --collective-timeout 2s",
		symptom: "ErrDesync or ErrCollectiveTimeout: a rank with no token in the step skips the EP dispatch its peer enters",
	},
	BlockingOutcomes: {
		needs: func(c *Config) []string {
			return need(c.Mode == transceiver.Async, "--transfer async (the blocking wait is in the async CTX's per-iteration status check)")
		},
		// A handover that takes time against a prefill: each request's KV
		// crosses one 400G NIC (CTX on one node, GEN on the next) in about
		// as long as its prefill.
		example: "--backend sim --hardware h100-nvlink-ib400 --ctx tp=8 --gen tp=1 --requests 16 --input 2048 --output 16 --arrival closed=16 " +
			"--prefill-per-token 500ns --decode-per-step 1ms --layers 8 --kv-heads 8 --head-dim 64 --gen-blocks 2048 --max-tokens 2048",
		symptom:  "throughput falls and TTFT grows: each prefill waits for the previous batch's KV to reach GEN (and where a rank's wait outlasts --collective-timeout, its peers time out)",
		timeNote: "its bug shows as time",
	},
}

// need lists the descriptions whose condition is false; its arguments
// alternate a condition and what it asks for.
func need(pairs ...any) []string {
	var out []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if !pairs[i].(bool) {
			out = append(out, pairs[i+1].(string))
		}
	}
	return out
}

// execGroup is the size of an instance's executor groups.
func execGroup(l topology.Layout) int {
	if l.AttentionDP {
		return l.Ranks()
	}
	return l.ReplicaRanks()
}

// poolCanFill reports whether the whole workload could fill role's pool
// on some rank: false when every request at its largest fits at once in
// the smallest pool any rank has (a shrink-pool fault's).
func (c *Config) poolCanFill(role topology.Role) bool {
	l, blocks := c.Ctx, c.smallestPool(role)
	if role == topology.Generation {
		l = c.Gen
	}
	need := c.Model.Blocks(c.Workload.maxTokens())
	if s, err := l.Shard(c.Model, 0); err == nil {
		need = max(need, s.BlocksFor(c.Workload.maxTokens())) // a shard holds at most the whole
	}
	return c.Workload.Requests*need > blocks
}

// smallestPool is the fewest blocks a rank of role has: its pool, or a
// shrink-pool fault's.
func (c *Config) smallestPool(role topology.Role) int {
	blocks := c.CtxBlocks
	if role == topology.Generation {
		blocks = c.GenBlocks
	}
	for _, f := range c.Faults {
		if f.Kind == FaultShrinkPool && f.Role == role {
			blocks = min(blocks, f.Blocks)
		}
	}
	return blocks
}

// TimeReplays are the replays whose bugs show as time: unclamped-poll
// fails no run; blocking-outcomes fails one only where a rank's wait
// outlasts the collective timeout.
var TimeReplays = []Replay{UnclampedPoll, BlockingOutcomes, IdleMaxPoll, SilentStartFailure}

// ReplayNotes says, for each replay switched on in c that c's run cannot
// show, what it lacks and a run that shows it (ReplayGaps); and for the
// replays that fail no run (TimeReplays), that their bug is time.
func ReplayNotes(c *Config) []string {
	out := ReplayGaps(c)
	for _, r := range TimeReplays {
		if c.Replays.On(r) && len(replayShows[r].needs(c)) == 0 {
			out = append(out, fmt.Sprintf("--replay %s %s: %s", r, replayShows[r].timeNote, replayShows[r].symptom))
		}
	}
	return out
}

// ReplayGaps says, for each replay switched on in c that c's run cannot
// show, what it lacks and a run that shows it; none when every replay can.
func ReplayGaps(c *Config) []string {
	var out []string
	for _, r := range Replays {
		if !c.Replays.On(r) {
			continue
		}
		s := replayShows[r]
		if miss := s.needs(c); len(miss) > 0 {
			out = append(out, fmt.Sprintf("--replay %s cannot show its bug in this run: it needs %s; one that shows it (%s): rankrun run %s --replay %s",
				r, strings.Join(miss, "; and "), s.symptom, s.example, r))
		}
	}
	return out
}

// ReplayExample is the rankrun run flags of a run that shows r's bug, and
// what it looks like there.
func ReplayExample(r Replay) (flags, symptom string) {
	s := replayShows[r]
	return s.example, s.symptom
}
