package main

// fast is the sim- and in-process-backed suite a mutant must fail: the
// packages whose tests exercise the runtime's decisions (no MPI, no
// network), each run once per mutant.
var fast = []string{"./consensus", "./transceiver", "./executor", "./scenario", "./explore", "./tests/multirank"}

// catalogue is the list of named mutants: each replaces one piece of text
// (which must occur exactly once in its file) by another. A mutant the
// suite does not kill fails make mutate. Keep each to one idea: the bug a
// real change could introduce.
var catalogue = []mutant{
	// Seed 000 and the status-check poll.
	{name: "poll-clamp-removed", file: "transceiver/check.go",
		old: "target = min(atLeast, len(t.sessions))", new: "target = atLeast",
		why: "an idle check waits for sessions that do not exist (seed 000)"},
	{name: "poll-fixed-wait", file: "transceiver/check.go",
		old: "\t\tif t.WaitEvent(ctx, deadline) != nil {\n\t\t\tbreak", new: "\t\tif t.waiter.Wait(ctx, nil, deadline) != nil {\n\t\t\tbreak",
		why: "the local poll sleeps out its interval instead of waking on transfer events"},
	{name: "slice-timeout-terminal", file: "transceiver/check.go",
		old: "\t\tif !t.clk.Now().Before(deadline) {\n\t\t\tbreak\n\t\t}",
		new: "\t\tif !t.clk.Now().Before(deadline) {\n\t\t\tfor _, s := range t.order {\n\t\t\t\tt.setTerminal(s, StateFailed, \"slice timeout\")\n\t\t\t}\n\t\t\tbreak\n\t\t}",
		why: "a poll slice that times out fails the transfers it waited for (a wait_for timeout read as a failure)"},
	// Seed 001 and the idle policy.
	{name: "single-rank-idle-reap-removed", file: "executor/policy.go",
		old: `return ProgressAction{Check: true, Idle: true, Row: "ctx sync, single rank, send in flight: reap"}`,
		new: `return ProgressAction{Idle: true, Row: "ctx sync, single rank, send in flight: reap"}`,
		why: "a single-rank sync CTX never reaps while idle: the pool stays pinned (seed 001)"},
	{name: "multi-rank-guard-removed", file: "executor/policy.go",
		old: `return ProgressAction{Row: "ctx sync, multi-rank: guard"}`,
		new: `return ProgressAction{Check: true, Idle: true, Row: "ctx sync, multi-rank: guard"}`,
		why: "an idle multi-rank sync CTX enters a collective on its own idleness"},
	{name: "admission-local-free-count", file: "executor/policy.go",
		old: "\tdefault:\n\t\ta.Agree = true\n", new: "\tdefault:\n",
		why: "a multi-rank group admits on each rank's own free count instead of the agreed minimum"},
	{name: "idle-wait-ignores-events", file: "executor/idle.go",
		old: "\t\tif err := l.tr.WaitEvent(ctx, deadline); err != nil {\n\t\t\treturn 0, err",
		new: "\t\tif err := l.waiter.Wait(ctx, nil, deadline); err != nil {\n\t\t\treturn 0, err",
		why: "the idle leader sleeps its whole idle tick instead of waking when a transfer ends"},
	// Consensus: each union and intersection swapped, on the path the
	// runtime uses (Agree's fold).
	{name: "ready-ids-union", file: "consensus/agree.go",
		old: "\t\tcase ai < bj:\n\t\t\ti = gallop(acc, i, bj) // ids of acc that b lacks: not ready\n",
		new: "\t\tcase ai < bj:\n\t\t\tdst = append(dst, acc[i])\n\t\t\ti++\n",
		why: "an id is ready when some rank (not every rank) has it over"},
	{name: "cancelled-intersection", file: "consensus/agree.go",
		old: "f |= (fa | fb) & fCancelled", new: "f |= (fa & fb) & fCancelled",
		why: "a request is cancelled only when every rank saw it cancelled"},
	{name: "failed-intersection", file: "consensus/agree.go",
		old: "f |= (fa | fb) & fFailed", new: "f |= (fa & fb) & fFailed",
		why: "a request is failed only when every rank saw it fail"},
	// In Agree's fold a completed union is equivalent (precedence leaves
	// completed only where no rank cancelled or failed, i.e. where every
	// rank completed): the mutant swaps it in Decide, the reference the
	// fold is tested against.
	{name: "completed-union", file: "consensus/consensus.go",
		old: "\tt.completed.intersect(*scratch)\n", new: "\tt.completed.union(*scratch)\n",
		why: "a request is completed when any rank saw it complete"},
	{name: "quiesced-union", file: "consensus/agree.go",
		old: "f |= (fa & fb) & fQuiesced", new: "f |= (fa | fb) & fQuiesced",
		why: "an outcome applies when any rank (not every rank) has no write in flight"},
	{name: "precedence-failed-over-cancelled", file: "consensus/agree.go",
		old: "\t\tcase w&fCancelled != 0:\n\t\t\td.Status = Cancelled\n\t\tcase w&fFailed != 0:\n\t\t\td.Status = Failed\n",
		new: "\t\tcase w&fFailed != 0:\n\t\t\td.Status = Failed\n\t\tcase w&fCancelled != 0:\n\t\t\td.Status = Cancelled\n",
		why: "failed wins over cancelled (DESIGN.md §4: cancelled > failed > completed)"},
	// Transfers.
	{name: "ever-sent-not-sticky", file: "transceiver/cancel.go",
		old: "\tif !s.cancelling {\n\t\ts.cancelling, s.cancelReason = true, why\n\t}\n\tt.stopAll(s)",
		new: "\tif !s.cancelling {\n\t\ts.cancelling, s.cancelReason = true, why\n\t}\n\tt.everSent = false\n\tt.stopAll(s)",
		why: "a CTX rank that cancels forgets it ever sent and skips the consensus its peers enter"},
	{name: "send-done-without-ack", file: "transceiver/send.go",
		old: "!(fs.posted && fs.done && (fs.acked || s.cancelling))", new: "!(fs.posted && fs.done)",
		why: "a send completes when the local send does, not when GEN acknowledged (verified) the bytes"},
	{name: "lease-ends-before-agreed", file: "transceiver/session.go",
		old: "\ts.terminal = t.clk.Now()\n", new: "\ts.terminal = t.clk.Now()\n\t_ = t.endLease(s)\n",
		why: "blocks are unpinned when this rank's transfer ends, before the group agreed on its outcome"},
	{name: "ctx-cancel-during-write", file: "transceiver/cancel.go",
		old:  "\tif s.inFlight() {\n\t\tt.stats.CancelRefused++\n\t\treturn\n\t}",
		new:  "\tif s.inFlight() {\n\t\tt.setTerminal(s, StateCancelled, why)\n\t\treturn\n\t}",
		also: []edit{{"transceiver/send.go", "\tcase s.inFlight():\n", "\tcase s.inFlight() && !t.clk.Now().After(s.deadline):\n"}},
		why:  "CTX accepts a cancel past the deadline while a send is still in flight (both places that refuse it)"},
	{name: "gen-cancel-during-write", file: "transceiver/recv.go",
		old: "\tcase !all:\n", new: "\tcase !all && !s.cancelling:\n",
		why: "GEN ends a cancelled receive while a fragment may still be written into its blocks"},
	{name: "verify-skipped", file: "transceiver/kvbytes.go",
		old: "b*tpb); !ok {", new: "b*tpb); false && !ok {",
		why: "received bytes are not checked against the pattern"},
	{name: "checksum-unchecked", file: "transceiver/kvbytes.go",
		old: "if sum && crc != h.PayloadCRC {", new: "if false && sum && crc != h.PayloadCRC {",
		why: "--verify checksum computes the CRC of what arrived but never compares it"},
	{name: "check-skips-odd-words", file: "transceiver/pattern.go",
		old: "\t\tb1 |= (v2 ^ w2) | (v3 ^ w3)\n", new: "",
		why: "the unrolled fused copy-check compares only half of the words it copies"},
	{name: "lent-bytes-not-stored", file: "transceiver/pattern.go",
		old: "\t\td[0], d[1], d[2], d[3] = v0, v1, v2, v3\n", new: "\t\t_ = d\n",
		why: "the fused copy-check checks the sender's bytes but never writes the destination blocks"},
	{name: "loan-completes-send-early", file: "comm/local/p2p.go",
		old:  "\t\trecv.got, recv.lent = send.message(), send\n\t\tclose(recv.done)\n",
		new:  "\t\trecv.got, recv.lent = send.message(), send\n\t\tclose(recv.done)\n\t\tclose(send.done)\n",
		also: []edit{{"comm/local/p2p.go", "\tif send != nil {\n\t\tclose(send.done)\n", "\tif send != nil {\n"}},
		why:  "a lending send completes before the receiver has read the bytes (the sender may reuse its blocks mid-read)",
		pkgs: []string{"./comm/local"}},
	{name: "votes-put-appends", file: "consensus/votes.go",
		old: "\tv.words = slices.Insert(v.words, i, w)\n", new: "\tv.words = append(v.words, w)\n",
		why: "a session's word goes to the end of the votes: AgreeVotes, which trusts their order, misses ready ids"},
	{name: "collectives-uncounted", file: "consensus/gather.go",
		old: "\tg.nColls.Add(1)\n", new: "",
		why: "status-check collectives are not counted (the idle-collective figures read 0)"},
	// The executor's agreements and checked mode.
	{name: "adp-outcome-first-report", file: "executor/outcomes.go",
		old: "if e.reports < t.holders {", new: "if e.reports < 1 {",
		why: "attention-DP decides a request on the first holder's report (the pre-fix deadlock)"},
	{name: "audit-off", file: "executor/audit.go",
		old: "if !l.audit || l.g.exec.Size() < 2 {", new: "if true || !l.audit || l.g.exec.Size() < 2 {",
		why: "checked mode no longer audits that the busy/admission decisions agree"},
	{name: "checked-stamp-ignored", file: "comm/checked.go",
		old: "\tif c.stampsAgree() {\n", new: "\tif true || c.stampsAgree() {\n",
		why: "checked mode exchanges stamps but never compares them", pkgs: []string{"./comm/...", "./tests/multirank"}},
}
