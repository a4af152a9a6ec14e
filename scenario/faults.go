package scenario

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/rankrun/rankrun/topology"
)

// FaultSpecs are the faults InjectFault places, each KIND@SIDE: every
// kind on every side it applies to (fail-transfer and drop-ack are a GEN
// rank's, corrupt and timeout-transfer a sending CTX rank's; the others
// either side's). stall-short stalls 200 ms, stall-long past the collective
// timeout.
var FaultSpecs = []string{
	"fail-transfer@gen", "drop-ack@gen", "corrupt@ctx", "timeout-transfer@ctx",
	"cancel@ctx", "cancel@gen", "stall-short@ctx", "stall-short@gen", "delay@ctx", "delay@gen",
	"exit@ctx", "exit@gen", "stall-long@ctx", "stall-long@gen", "shrink-pool@ctx", "shrink-pool@gen",
}

// FaultPositions are the rank positions a fault is placed on. Different
// positions run different code: the first rank of a group leads it (intake,
// the idle tick, the report), the last and middle ones only follow, and
// world rank 0 also hosts the router.
//
//	first   the first rank of the replica (DP index) that holds the request
//	middle  a middle rank of it (a replica of 3 ranks or more)
//	last    its last rank
//	world0  world rank 0: CTX rank 0, the router's host (CTX faults only)
//
// A CTX fault that acts on a rank's send session (corrupt,
// timeout-transfer, cancel) counts only the ranks that send: with
// duplicated heads (tp > kv-heads, attention-DP) one TP index of each set
// sends, and the others hold no session to fault. A fault that is not tied
// to a request (delay, shrink-pool) counts the whole instance.
var FaultPositions = []string{"first", "middle", "last", "world0"}

// corruptAts are the byte positions a corrupt fault is drawn from (the
// fault's at=): the middle, both ends, and corners that mix the axes.
var corruptAts = []string{"mid", "first", "last", "last/first/v/last/first", "first/last/k/first/last", "first/last/v/last/first"}

// InjectFault adds the fault spec (KIND@SIDE, one of FaultSpecs) to s on
// the rank at position (one of FaultPositions), on a request drawn from
// rng, and sets the outcome it must have (replacing s.Expect): the run
// still completes with the faulted request failed, cancelled or
// recovered, or it ends with the fault's named error. It shortens the
// transfer deadline, so that peers of a faulted rank end their sessions
// through the deadline and an accepted cancel (DESIGN.md §5) well within
// the collective timeout. It reports false when the layouts have no such
// position (no middle rank in a replica of 2; world0 on the GEN side) or
// the fault cannot show there (stall-long on a side with no peer in a
// collective with the stalled rank).
func (s *Scenario) InjectFault(spec, position string, rng *rand.Rand) (bool, error) {
	kind, side, ok := strings.Cut(spec, "@")
	if !ok || !slices.Contains(FaultSpecs, spec) {
		return false, fmt.Errorf("scenario: unknown fault %q (valid: %s)", spec, strings.Join(FaultSpecs, " "))
	}
	if !slices.Contains(FaultPositions, position) {
		return false, fmt.Errorf("scenario: unknown fault position %q (valid: %s)", position, strings.Join(FaultPositions, " "))
	}
	ctxL, err := topology.ParseLayout(s.Ctx)
	if err != nil {
		return false, err
	}
	genL, err := topology.ParseLayout(s.Gen)
	if err != nil {
		return false, err
	}
	l := ctxL
	if side == "gen" {
		l = genL
	}
	if position == "world0" && side != "ctx" {
		return false, nil
	}
	// A stall past the collective timeout is named by a peer waiting in a
	// collective with the stalled rank: one of its executor group (a
	// replica of more than one rank, or the whole instance under
	// attention-DP). A single-rank replica has no such peer (the other
	// replicas meet it only in status checks, which they skip when idle):
	// it is merely slow, and the run waits for it.
	if kind == "stall-long" && !l.AttentionDP && l.ReplicaRanks() < 2 {
		return false, nil
	}
	n := s.Requests
	req := 1 + rng.IntN(n)
	if position == "world0" {
		// A request of DP index 0, whose replica world rank 0 is in.
		req = 1 + l.DP*rng.IntN((n+l.DP-1)/l.DP)
	}
	rank, ok := s.positionRank(l, side == "ctx", kind, position, req)
	if !ok {
		return false, nil
	}
	// Two fifths of the collective timeout (2 s at the 5 s default): well
	// within it, so a sync rank blocked in a receive until the deadline
	// and its cancel is back before a peer's collective times out; long
	// enough that no other transfer meets it on a loaded host (a drop-ack
	// or stall-short case must still complete every request).
	s.TransferTimeout = s.CollectiveTimeout * 2 / 5
	on := fmt.Sprintf("%s:%d", side, rank)
	s.Expect = Expectation{}
	lines := []string{"ok"}
	switch kind {
	case "fail-transfer":
		s.Faults = []string{fmt.Sprintf("fail-transfer@%s,req=%d", on, req)}
		lines = append(lines, fmt.Sprintf("completed <= %d", n-1), "failed >= 1")
	case "timeout-transfer":
		// Under sync, requests admitted with it may run into their own
		// deadline while the rank waits in its receive: at least one.
		s.Faults = []string{fmt.Sprintf("timeout-transfer@%s,req=%d", on, req)}
		lines = append(lines, fmt.Sprintf("completed <= %d", n-1), "cancelled >= 1")
	case "cancel":
		s.Faults = []string{fmt.Sprintf("cancel@%s,req=%d", on, req)}
		lines = append(lines, fmt.Sprintf("completed <= %d", n-1), "cancelled >= 1")
	case "drop-ack":
		s.Faults = []string{fmt.Sprintf("drop-ack@%s,req=%d", on, req)}
		lines = append(lines, fmt.Sprintf("completed == %d", n))
	case "corrupt":
		// Failed by the receiver's verification, or cancelled when the
		// deadline comes first; never completed, never verified.
		s.Faults = []string{fmt.Sprintf("corrupt@%s,req=%d,at=%s", on, req, corruptAts[rng.IntN(len(corruptAts))])}
		lines = append(lines, fmt.Sprintf("completed <= %d", n-1), "bytes-verified < bytes-moved")
	case "stall-short":
		s.Faults = []string{fmt.Sprintf("stall@%s,req=%d,for=200ms", on, req)}
		lines = append(lines, fmt.Sprintf("completed == %d", n))
	case "stall-long":
		s.Faults = []string{fmt.Sprintf("stall@%s,req=%d,for=1m", on, req)}
		lines = []string{"error ErrCollectiveTimeout within 20s", `message contains "never arrived"`}
	case "delay":
		s.Faults = []string{fmt.Sprintf("delay@%s,for=1ms", on)}
		lines = append(lines, fmt.Sprintf("completed == %d", n))
	case "exit":
		s.Faults = []string{fmt.Sprintf("exit@%s,req=%d", on, req)}
		lines = []string{"error ErrInjected within 10s", `message contains "exits on request"`}
	case "shrink-pool":
		// The smallest pool that holds the largest request: admission
		// waits for room, agreed over the group; nothing else changes.
		cfg, err := s.Config(false)
		if err != nil {
			return false, err
		}
		role := topology.Context
		if side == "gen" {
			role = topology.Generation
		}
		need, err := cfg.MinPoolBlocks(role, rank)
		if err != nil {
			return false, err
		}
		s.Faults = []string{fmt.Sprintf("shrink-pool@%s,blocks=%d", on, need)}
		lines = append(lines, fmt.Sprintf("completed == %d", n))
	}
	for _, l := range lines {
		if err := s.Expect.Add(l); err != nil {
			return false, err
		}
	}
	return true, nil
}

// positionRank is the rank of layout l (the CTX side's when ctxSide) at
// position for a fault of kind on request req: among the ranks of the replica that holds req (DP index
// (req-1) % dp, where the router sends it), or of the whole instance for
// a fault not tied to a request, only those that send for a fault on sent
// bytes. ok is false when there is no such position.
func (s *Scenario) positionRank(l topology.Layout, ctxSide bool, kind, position string, req int) (int, bool) {
	var cands []int
	switch kind {
	case "delay", "shrink-pool":
		for r := range l.Ranks() {
			cands = append(cands, r)
		}
	default:
		d := (req - 1) % l.DP
		for r := d * l.ReplicaRanks(); r < (d+1)*l.ReplicaRanks(); r++ {
			if ctxSide && (kind == "corrupt" || kind == "timeout-transfer" || kind == "cancel") && sender(l, s.Model, r) != r {
				continue
			}
			cands = append(cands, r)
		}
	}
	switch position {
	case "first":
		return cands[0], true
	case "last":
		return cands[len(cands)-1], true
	case "middle":
		if len(cands) < 3 {
			return 0, false
		}
		return cands[len(cands)/2], true
	case "world0":
		return 0, cands[0] == 0
	}
	return 0, false
}

// sender moves a CTX rank that holds a duplicate of its heads (every TP
// index under attention-DP, tp > kv-heads otherwise) to the TP index that
// sends them: a fault on the bytes a rank sends applies only there.
func sender(l topology.Layout, m topology.Model, rank int) int {
	c := l.Coord(rank)
	switch {
	case l.AttentionDP:
		c.TP = 0
	case l.TP > m.KVHeads:
		c.TP -= c.TP % (l.TP / m.KVHeads)
	}
	return l.RankOf(c)
}
