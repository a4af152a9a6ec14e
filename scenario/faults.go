package scenario

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rankrun/rankrun/topology"
)

// FaultKinds are the kinds of fault InjectFault draws from (stall-long
// needs a GEN executor group of more than one rank).
var FaultKinds = []string{"fail-transfer", "timeout-transfer", "cancel-ctx", "cancel-gen", "drop-ack", "corrupt",
	"stall-short", "delay", "exit", "stall-long"}

// InjectFault adds one fault of kind to s on a rank and request drawn from
// rng, and sets the outcome it must have (replacing s.Expect): the run
// still completes with the faulted request failed, cancelled or recovered,
// or it ends with the fault's named error. It shortens the transfer
// deadline, so that peers of a faulted rank end their sessions through the
// deadline and an accepted cancel (DESIGN.md §5) well within the
// collective timeout. It reports false for a kind that cannot apply to the
// layouts (stall-long on a GEN executor group of one rank).
func (s *Scenario) InjectFault(kind string, rng *rand.Rand) (bool, error) {
	ctxL, err := topology.ParseLayout(s.Ctx)
	if err != nil {
		return false, err
	}
	genL, err := topology.ParseLayout(s.Gen)
	if err != nil {
		return false, err
	}
	// A stall past the collective timeout is named by a peer waiting in a
	// collective with the stalled rank: one of its executor group (a
	// replica of more than one rank, or the whole instance under
	// attention-DP). A single-rank replica has no such peer (the other
	// replicas meet it only in status checks, which they skip when idle):
	// it is merely slow, and the run waits for it.
	if kind == "stall-long" && !genL.AttentionDP && genL.ReplicaRanks() < 2 {
		return false, nil
	}
	s.TransferTimeout = 500 * time.Millisecond
	n := s.Requests
	req := 1 + rng.IntN(n)
	// A rank on each side that holds the request: the router sends it to
	// DP index (req-1)%dp, whose ranks are the replica's (a fault on any
	// other rank would never fire).
	holder := func(l topology.Layout) int {
		return ((req-1)%l.DP)*l.ReplicaRanks() + rng.IntN(l.ReplicaRanks())
	}
	ctxRank, genRank := sender(ctxL, s.Model, holder(ctxL)), holder(genL)
	s.Expect = Expectation{}
	lines := []string{"ok"}
	switch kind {
	case "fail-transfer":
		s.Faults = []string{fmt.Sprintf("fail-transfer@gen:%d,req=%d", genRank, req)}
		lines = append(lines, fmt.Sprintf("completed <= %d", n-1), "failed >= 1")
	case "timeout-transfer":
		// Under sync, requests admitted with it may run into their own
		// deadline while the rank waits in its receive: at least one.
		s.Faults = []string{fmt.Sprintf("timeout-transfer@ctx:%d,req=%d", ctxRank, req)}
		lines = append(lines, fmt.Sprintf("completed <= %d", n-1), "cancelled >= 1")
	case "cancel-ctx":
		s.Faults = []string{fmt.Sprintf("cancel@ctx:%d,req=%d", ctxRank, req)}
		lines = append(lines, fmt.Sprintf("completed <= %d", n-1), "cancelled >= 1")
	case "cancel-gen":
		s.Faults = []string{fmt.Sprintf("cancel@gen:%d,req=%d", genRank, req)}
		lines = append(lines, fmt.Sprintf("completed <= %d", n-1), "cancelled >= 1")
	case "drop-ack":
		s.Faults = []string{fmt.Sprintf("drop-ack@gen:%d,req=%d", genRank, req)}
		lines = append(lines, fmt.Sprintf("completed == %d", n))
	case "corrupt":
		// Failed by the receiver's verification, or cancelled when the
		// deadline comes first; never completed, never verified.
		s.Faults = []string{fmt.Sprintf("corrupt@ctx:%d,req=%d", ctxRank, req)}
		lines = append(lines, fmt.Sprintf("completed <= %d", n-1), "bytes-verified < bytes-moved")
	case "stall-short":
		s.Faults = []string{fmt.Sprintf("stall@gen:%d,req=%d,for=200ms", genRank, req)}
		lines = append(lines, fmt.Sprintf("completed == %d", n))
	case "stall-long":
		s.Faults = []string{fmt.Sprintf("stall@gen:%d,req=%d,for=1m", genRank, req)}
		lines = []string{"error ErrCollectiveTimeout within 15s", `message contains "never arrived"`}
	case "delay":
		s.Faults = []string{fmt.Sprintf("delay@gen:%d,for=1ms", genRank)}
		lines = append(lines, fmt.Sprintf("completed == %d", n))
	case "exit":
		if rng.IntN(2) == 0 {
			s.Faults = []string{fmt.Sprintf("exit@ctx:%d,req=%d", ctxRank, req)}
		} else {
			s.Faults = []string{fmt.Sprintf("exit@gen:%d,req=%d", genRank, req)}
		}
		lines = []string{"error ErrInjected within 10s", `message contains "exits on request"`}
	default:
		return false, fmt.Errorf("scenario: unknown fault kind %q (valid: %v)", kind, FaultKinds)
	}
	for _, l := range lines {
		if err := s.Expect.Add(l); err != nil {
			return false, err
		}
	}
	return true, nil
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
