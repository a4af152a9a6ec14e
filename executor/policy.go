package executor

import "fmt"

// IdleInput is everything the idle-progress decision may depend on. Every
// field is either configuration or rank-local state that the decision is
// allowed to read *because* the action it picks enters no collective, or
// enters them on every rank of the group (see DESIGN.md §6).
type IdleInput struct {
	Sync         bool // GEN transfer mode is sync
	GroupRanks   int  // ranks in the executor group
	SendInFlight bool // this CTX rank holds send sessions
}

// IdleAction is what an idle iteration does about transfer progress.
type IdleAction struct {
	// Check: run a CTX status check.
	Check bool
	// AtLeast is the check's at_least (always 0: no rank waits locally,
	// so every rank reaches the consensus together).
	AtLeast int
	// Collectives: the check may enter collectives. Only true where every
	// rank of the group takes the same action every idle iteration.
	Collectives bool
	// Row names the row of the DESIGN.md §6 table that applied.
	Row string
}

func (a IdleAction) String() string {
	if !a.Check {
		return fmt.Sprintf("return (%s)", a.Row)
	}
	return fmt.Sprintf("check at_least=%d collectives=%t (%s)", a.AtLeast, a.Collectives, a.Row)
}

// DecideIdle is the idle-progress policy of DESIGN.md §6, a pure function:
//
//	mode   ranks  send in flight  action
//	async  1      any             check, at_least 0, no collectives
//	async  >1     any             check, at_least 0, on every rank (collectives inside)
//	sync   1      yes             check, at_least 0 (reap: seed 001's fix)
//	sync   1      no              return
//	sync   >1     any             return: a peer may be in a rank-local sync receive
func DecideIdle(in IdleInput) IdleAction {
	switch {
	case !in.Sync && in.GroupRanks <= 1:
		return IdleAction{Check: true, Row: "async, single rank"}
	case !in.Sync:
		return IdleAction{Check: true, Collectives: true, Row: "async, multi-rank: every rank, every iteration"}
	case in.GroupRanks <= 1 && in.SendInFlight:
		return IdleAction{Check: true, Row: "sync, single rank, send in flight: reap"}
	case in.GroupRanks <= 1:
		return IdleAction{Row: "sync, single rank, nothing in flight"}
	default:
		return IdleAction{Row: "sync, multi-rank: guard"}
	}
}
