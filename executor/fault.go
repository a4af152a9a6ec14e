package executor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
	"github.com/rankrun/rankrun/transceiver"
)

// FaultKind names an injected fault.
type FaultKind string

// The faults the runtime can inject. Each applies to one rank.
const (
	FaultFailTransfer    FaultKind = "fail-transfer"    // GEN rank fails a request locally after receiving it
	FaultCorrupt         FaultKind = "corrupt"          // CTX rank flips a byte of a request's fragments
	FaultDropAck         FaultKind = "drop-ack"         // GEN rank never acknowledges a request
	FaultTimeoutTransfer FaultKind = "timeout-transfer" // CTX rank never sends a request's fragments
	FaultFailSend        FaultKind = "fail-send"        // CTX rank's send of a request fails after after=K of its fragments left (0: before any byte moves)
	FaultDelayAck        FaultKind = "delay-ack"        // GEN rank delays its acknowledgements of a request's fragments by for=D
	FaultCancel          FaultKind = "cancel"           // rank cancels a request as soon as its session starts
	FaultStall           FaultKind = "stall"            // rank stalls once, for a duration, when it first sees the request
	FaultDelay           FaultKind = "delay"            // rank sleeps a duration at the start of every iteration
	FaultExit            FaultKind = "exit"             // rank ends with ErrInjected when it first sees the request
	FaultShrinkPool      FaultKind = "shrink-pool"      // rank's KV pool has only the given number of blocks
	FaultMisroute        FaultKind = "misroute"         // rank's EP dispatch counts are one copy off in the first step with the request
)

// FaultKinds lists every fault.
var FaultKinds = []FaultKind{FaultFailTransfer, FaultCorrupt, FaultDropAck, FaultTimeoutTransfer, FaultFailSend, FaultDelayAck, FaultCancel,
	FaultStall, FaultDelay, FaultExit, FaultShrinkPool, FaultMisroute}

// Fault is one injected fault: Kind on rank Rank of instance Role.
type Fault struct {
	Kind     FaultKind
	Role     topology.Role
	Rank     int
	Request  request.ID    // req=: the request it applies to (1-based ids)
	Duration time.Duration // for=: stall and delay
	Blocks   int           // blocks=: shrink-pool
	// at=: the byte a corrupt fault flips (transceiver.ParseCorruptAt:
	// mid, first, last, or block/layer/kv/head/token).
	CorruptAt transceiver.CorruptAt
	atGiven   bool // at= was given (at=mid is the zero CorruptAt)
	// after=: fail-send fails once this many of the rank's fragments of
	// the request have left (0: before any byte moves; at least the
	// rank's fragment count: after every byte left, before the
	// acknowledgements).
	After int
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s@%s:%d", f.Kind, f.Role, f.Rank)
	if f.Request != 0 {
		s += fmt.Sprintf(",req=%d", f.Request)
	}
	if f.Duration != 0 {
		s += ",for=" + f.Duration.String()
	}
	if f.Blocks != 0 {
		s += fmt.Sprintf(",blocks=%d", f.Blocks)
	}
	if f.CorruptAt.At {
		s += ",at=" + f.CorruptAt.String()
	}
	if f.After != 0 {
		s += fmt.Sprintf(",after=%d", f.After)
	}
	return s
}

// ParseFault parses KIND@ROLE:RANK[,req=N][,for=DURATION][,blocks=N][,at=POS][,after=K],
// for example "fail-transfer@gen:1,req=3", "stall@ctx:0,req=2,for=2s" or
// "corrupt@ctx:1,req=4,at=last/first/v/last/first".
func ParseFault(s string) (Fault, error) {
	var f Fault
	bad := func(format string, args ...any) (Fault, error) {
		return Fault{}, fmt.Errorf("executor: fault %q: %s", s, fmt.Sprintf(format, args...))
	}
	head, opts, hasOpts := strings.Cut(strings.TrimSpace(s), ",")
	kind, where, ok := strings.Cut(head, "@")
	if !ok {
		return bad("want KIND@ROLE:RANK (for example fail-transfer@gen:1,req=3)")
	}
	f.Kind = FaultKind(kind)
	if !slices.Contains(FaultKinds, f.Kind) {
		names := make([]string, len(FaultKinds))
		for i, k := range FaultKinds {
			names[i] = string(k)
		}
		return bad("unknown fault %q: valid faults are %s", kind, strings.Join(names, ", "))
	}
	role, rank, ok := strings.Cut(where, ":")
	if !ok {
		return bad("want ROLE:RANK after @, for example gen:1")
	}
	switch role {
	case "ctx":
		f.Role = topology.Context
	case "gen":
		f.Role = topology.Generation
	default:
		return bad("role %q: must be ctx or gen", role)
	}
	r, err := strconv.Atoi(rank)
	if err != nil || r < 0 {
		return bad("rank %q: must be a non-negative integer", rank)
	}
	f.Rank = r
	if hasOpts {
		seen := map[string]bool{}
		for _, kv := range strings.Split(opts, ",") {
			k, v, ok := strings.Cut(kv, "=")
			switch {
			case kv == "":
				return bad("an empty option (a stray comma?)")
			case !ok:
				return bad("option %q: want key=value", kv)
			case seen[k]:
				return bad("%s= given twice", k)
			}
			seen[k] = true
			switch k {
			case "req":
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil || n == 0 {
					return bad("req=%q: must be a request id >= 1", v)
				}
				f.Request = request.ID(n)
			case "for":
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return bad("for=%q: must be a positive duration such as 500ms", v)
				}
				f.Duration = d
			case "blocks":
				n, err := strconv.Atoi(v)
				if err != nil || n <= 0 {
					return bad("blocks=%q: must be a positive integer", v)
				}
				f.Blocks = n
			case "at":
				at, err := transceiver.ParseCorruptAt(v)
				if err != nil {
					return bad("at=: %v", err)
				}
				f.CorruptAt = at
				f.atGiven = true
			case "after":
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return bad("after=%q: must be a fragment count >= 0", v)
				}
				f.After = n
			default:
				return bad("unknown option %q: valid options are req, for, blocks, at, after", k)
			}
		}
	}
	return f, nil
}

func (f Fault) validate(c *Config) error {
	n := c.Ctx.Ranks()
	if f.Role == topology.Generation {
		n = c.Gen.Ranks()
	}
	if f.Rank >= n {
		return fmt.Errorf("rank %d outside the %s instance's 0..%d", f.Rank, f.Role, n-1)
	}
	if err := f.validateOptions(c); err != nil {
		return err
	}
	switch f.Kind {
	case FaultFailTransfer, FaultDropAck, FaultDelayAck:
		if f.Role != topology.Generation {
			return fmt.Errorf("%s applies to gen ranks", f.Kind)
		}
		if f.Kind == FaultDelayAck && f.Duration <= 0 {
			return fmt.Errorf("%s needs for=DURATION", f.Kind)
		}
	case FaultCorrupt, FaultTimeoutTransfer, FaultFailSend:
		if f.Role != topology.Context {
			return fmt.Errorf("%s applies to ctx ranks", f.Kind)
		}
	case FaultStall, FaultDelay:
		if f.Duration <= 0 {
			return fmt.Errorf("%s needs for=DURATION", f.Kind)
		}
	case FaultShrinkPool:
		return f.validateShrink(c)
	case FaultMisroute:
		l := c.Ctx
		if f.Role == topology.Generation {
			l = c.Gen
		}
		if !needsDispatch(l) {
			return fmt.Errorf("misroute applies to a layout that dispatches tokens (ep under adp); %s %s has no EP dispatch", f.Role, l)
		}
	}
	return nil
}

// validateOptions checks that each option given applies to the fault's
// kind, and that req= is there where the kind needs it.
func (f Fault) validateOptions(c *Config) error {
	perRequest := f.Kind != FaultDelay && f.Kind != FaultShrinkPool
	timed := f.Kind == FaultStall || f.Kind == FaultDelay || f.Kind == FaultDelayAck
	switch {
	case perRequest && f.Request == 0:
		return fmt.Errorf("req=N is required: %s applies to one request (1..%d)", f.Kind, c.Workload.Requests)
	case perRequest && f.Request > request.ID(c.Workload.Requests):
		return fmt.Errorf("req=%d: must name one of the workload's requests 1..%d", f.Request, c.Workload.Requests)
	case !perRequest && f.Request != 0:
		return fmt.Errorf("req= does not apply to %s (it acts on every request)", f.Kind)
	case !timed && f.Duration != 0:
		return fmt.Errorf("for= does not apply to %s (only to stall, delay and delay-ack)", f.Kind)
	case f.Kind != FaultShrinkPool && f.Blocks != 0:
		return fmt.Errorf("blocks= does not apply to %s (only to shrink-pool)", f.Kind)
	case f.Kind != FaultCorrupt && (f.CorruptAt.At || f.atGiven):
		return fmt.Errorf("at= does not apply to %s (only to corrupt)", f.Kind)
	case f.Kind != FaultFailSend && f.After != 0:
		return fmt.Errorf("after= does not apply to %s (only to fail-send)", f.Kind)
	}
	return nil
}

// validateShrink checks a shrink-pool fault: it shrinks the rank's pool,
// and the pool it leaves still holds the largest request (else the run
// could only stall).
func (f Fault) validateShrink(c *Config) error {
	if f.Blocks <= 0 {
		return fmt.Errorf("shrink-pool needs blocks=N")
	}
	pool := c.CtxBlocks
	if f.Role == topology.Generation {
		pool = c.GenBlocks
	}
	if f.Blocks > pool {
		return fmt.Errorf("blocks=%d: larger than the %s pool of %d blocks (--%s-blocks): shrink-pool can only shrink it", f.Blocks, f.Role, pool, f.Role)
	}
	need, err := c.MinPoolBlocks(f.Role, f.Rank)
	if err != nil {
		return err
	}
	if need > f.Blocks {
		return fmt.Errorf("blocks=%d: a %d-token request needs %d blocks on %s rank %d, so it could never be admitted (the run would stall)",
			f.Blocks, c.Workload.maxTokens(), need, f.Role, f.Rank)
	}
	return nil
}

// MinPoolBlocks is the smallest KV pool rank `rank` of role's instance
// can run c's workload with: the blocks its share of the largest request
// takes (shrink-pool's lower bound).
func (c *Config) MinPoolBlocks(role topology.Role, rank int) (int, error) {
	l := c.Ctx
	if role == topology.Generation {
		l = c.Gen
	}
	s, err := l.Shard(c.Model, rank)
	if err != nil {
		return 0, err
	}
	return s.BlocksFor(c.Workload.maxTokens()), nil
}

// rankFaults collects the faults of one rank.
type rankFaults struct {
	tx       *transceiver.Faults
	stall    map[request.ID]time.Duration
	delay    time.Duration
	exit     map[request.ID]bool
	blocks   int
	misroute request.ID
}

func faultsFor(all []Fault, role topology.Role, rank int) rankFaults {
	rf := rankFaults{stall: map[request.ID]time.Duration{}, exit: map[request.ID]bool{}}
	tx := &transceiver.Faults{CorruptFragment: map[request.ID]transceiver.CorruptAt{}, DropAck: map[request.ID]bool{},
		FailReceive: map[request.ID]bool{}, Withhold: map[request.ID]bool{}, Cancel: map[request.ID]bool{}, FailSend: map[request.ID]int{},
		DelayAck: map[request.ID]time.Duration{}}
	any := false
	for _, f := range all {
		if f.Role != role || f.Rank != rank {
			continue
		}
		id := f.Request
		switch f.Kind {
		case FaultFailTransfer:
			tx.FailReceive[id], any = true, true
		case FaultCorrupt:
			tx.CorruptFragment[id], any = f.CorruptAt, true
		case FaultDropAck:
			tx.DropAck[id], any = true, true
		case FaultTimeoutTransfer:
			tx.Withhold[id], any = true, true
		case FaultFailSend:
			tx.FailSend[id], any = f.After, true
		case FaultDelayAck:
			tx.DelayAck[id], any = f.Duration, true
		case FaultCancel:
			tx.Cancel[id], any = true, true
		case FaultStall:
			rf.stall[f.Request] = f.Duration
		case FaultDelay:
			rf.delay = f.Duration
		case FaultExit:
			rf.exit[f.Request] = true
		case FaultShrinkPool:
			rf.blocks = f.Blocks
		case FaultMisroute:
			rf.misroute = f.Request
		}
	}
	if any {
		rf.tx = tx
	}
	return rf
}

// ValidateFault checks c.Faults[i] against the rest of c, the rule
// Validate applies, for callers that name the fault their own way (the
// CLI names its --fault flag).
func (c *Config) ValidateFault(i int) error { return c.Faults[i].validate(c) }
