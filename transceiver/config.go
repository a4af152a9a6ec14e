package transceiver

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"
)

// Mode is how GEN receives: in the background, polled every iteration
// (Async, the default), or blocking the rank in a rank-local receive for each
// admitted request (Sync, ReceiveSync). The executor chooses; a Transceiver
// serves both.
type Mode uint8

// Modes.
const (
	Async Mode = iota
	Sync
)

func (m Mode) String() string {
	if m == Sync {
		return "sync"
	}
	return "async"
}

// ParseMode parses "async" or "sync".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "async", "":
		return Async, nil
	case "sync":
		return Sync, nil
	}
	return Async, fmt.Errorf("transceiver: transfer mode %q: must be async or sync", s)
}

// Verify is how a GEN rank checks the KV bytes it receives. Every mode
// checks the header, the fragment's geometry and its length.
type Verify uint8

// Verify modes.
const (
	// VerifyFull checks every byte against the KV pattern while copying it
	// into the destination blocks (the default).
	VerifyFull Verify = iota
	// VerifyChecksum compares an xxh3 digest of each fragment that the CTX
	// rank computes while the fragment travels (and sends after it) with
	// one computed over what was copied, run by run (digest.go).
	VerifyChecksum
	// VerifyOff copies only.
	VerifyOff
)

func (v Verify) String() string {
	switch v {
	case VerifyChecksum:
		return "checksum"
	case VerifyOff:
		return "off"
	}
	return "full"
}

// ParseVerify parses "full", "checksum" or "off".
func ParseVerify(s string) (Verify, error) {
	switch s {
	case "full", "":
		return VerifyFull, nil
	case "checksum":
		return VerifyChecksum, nil
	case "off":
		return VerifyOff, nil
	}
	return VerifyFull, fmt.Errorf("transceiver: verify %q: must be full, checksum or off", s)
}

// Sentinel errors.
var (
	ErrConfig    = errors.New("transceiver: bad configuration")
	ErrDuplicate = errors.New("transceiver: duplicate request")
	ErrUnknown   = errors.New("transceiver: unknown request")
	ErrClosed    = errors.New("transceiver: closed")
)

// Request is what both sides agree about a request: its id, its KV length,
// and the DP indices of the CTX and GEN instances that hold it.
type Request struct {
	ID     request.ID
	Tokens int
	CtxDP  int
	GenDP  int
}

// Replays re-create historical bugs on purpose (DESIGN.md §7). All off by
// default.
type Replays struct {
	// UnclampedPoll removes the clamp of the bounded poll: a target above
	// the sessions held (an empty table and at_least 1) waits out the whole
	// interval (seed 000).
	UnclampedPoll bool
	// SilentStartFailure: a CTX rank that cannot start a transfer fails
	// its session without telling its GEN peers (vLLM #50754, where the
	// prefill side logged and moved on): they wait for bytes that never
	// come, until their transfer deadline.
	SilentStartFailure bool
	// DeadlinesWhenBusy checks transfer deadlines only while the executor
	// says its iteration executed a batch (Transceiver.SetIdle): an idle
	// rank's wedged transfer never times out (TensorRT-LLM #17124, whose
	// PP loop reached its transfer-timeout check only after a batch).
	DeadlinesWhenBusy bool
}

// Config configures one rank's transceiver.
type Config struct {
	Role  topology.Role
	Ctx   topology.Layout
	Gen   topology.Layout
	Model topology.Model
	// Rank is this rank's index within its instance.
	Rank int
	// World holds every CTX rank (world ranks [0, Ctx.Ranks())) followed by
	// every GEN rank.
	World comm.Comm
	// Scope is this rank's consensus hops (CTX: TP then PP group; GEN: its
	// group). Empty for a group of one.
	Scope []comm.Comm
	// Pool is this rank's KV block pool; its BlockBytes must equal the
	// rank's shard block size.
	Pool *kvpool.Pool
	// SenderWaitSlice bounds the rank-local poll of a CTX status check
	// (default 1 s, like kv_transfer_sender_future_timeout_ms).
	SenderWaitSlice time.Duration
	// GenPollInterval bounds the rank-local poll of a GEN status check
	// (default 5 s, like kv_transfer_poll_interval_ms).
	GenPollInterval time.Duration
	// TransferTimeout is the overall deadline of one transfer, after which
	// it is cancelled (default 60 s).
	TransferTimeout time.Duration
	// Verify is how GEN checks received bytes (VerifyFull when zero); it
	// must be the same on every rank.
	Verify  Verify
	Replays Replays
	Log     *zap.Logger
	// Clock is the time source of every timestamp, deadline and timed
	// wait (clock.Real() when nil).
	Clock clock.Clock
	// Faults injects rank-local failures for regression tests (nil: none).
	Faults *Faults
}

// Defaults of the status-check bounds and the transfer deadline (the
// production stack's kv_transfer_sender_future_timeout_ms and
// kv_transfer_poll_interval_ms), used wherever a caller leaves them zero.
const (
	DefaultSenderWaitSlice = time.Second
	DefaultGenPollInterval = 5 * time.Second
	DefaultTransferTimeout = 60 * time.Second
)

// Faults injects rank-local transfer faults. The executor or a test decides
// them from a seed; the transceiver only applies them.
type Faults struct {
	// CorruptFragment flips a byte of every fragment this CTX rank sends
	// for these requests, at the position given (GEN verification must
	// fail it, naming that place).
	CorruptFragment map[request.ID]CorruptAt
	// DropAck makes this GEN rank never acknowledge these requests (the
	// CTX side must time out and cancel).
	DropAck map[request.ID]bool
	// FailReceive makes this GEN rank fail these requests locally after
	// receiving them (a rank-local error).
	FailReceive map[request.ID]bool
	// Withhold makes this CTX rank never send these requests' fragments, so
	// the transfer runs into its deadline on both sides.
	Withhold map[request.ID]bool
	// Cancel makes this rank ask to cancel these requests as soon as their
	// session starts (a cancel seen by one rank only).
	Cancel map[request.ID]bool
	// DropDigest makes this CTX rank never send the digest of these
	// requests' fragments (--verify checksum): the receiver must give up
	// on them at the transfer deadline.
	DropDigest map[request.ID]bool
	// FailSend makes this CTX rank's send of these requests fail once the
	// given number of its fragments have left (0: it cannot start, before
	// any byte moves); the session fails here, and its GEN peers must be
	// told (the fragments that left complete as sent).
	FailSend map[request.ID]int
	// DelayAck makes this GEN rank hold its acknowledgements of these
	// requests' fragments for the given time: the completion
	// notification comes late.
	DelayAck map[request.ID]time.Duration
}

func (c *Config) fill() error {
	if c.Role != topology.Context && c.Role != topology.Generation {
		return fmt.Errorf("%w: Role must be topology.Context or topology.Generation", ErrConfig)
	}
	if c.World == nil {
		return fmt.Errorf("%w: World is nil", ErrConfig)
	}
	if c.Pool == nil {
		return fmt.Errorf("%w: Pool is nil", ErrConfig)
	}
	if c.SenderWaitSlice <= 0 {
		c.SenderWaitSlice = DefaultSenderWaitSlice
	}
	if c.GenPollInterval <= 0 {
		c.GenPollInterval = DefaultGenPollInterval
	}
	if c.TransferTimeout <= 0 {
		c.TransferTimeout = DefaultTransferTimeout
	}
	if c.Verify > VerifyOff {
		return fmt.Errorf("%w: Verify %d: must be VerifyFull, VerifyChecksum or VerifyOff", ErrConfig, c.Verify)
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	c.Clock = clock.Or(c.Clock)
	if want := c.Ctx.Ranks() + c.Gen.Ranks(); c.World.Size() != want {
		return fmt.Errorf("%w: World has %d ranks, the layouts need %d (ctx %s: %d + gen %s: %d)",
			ErrConfig, c.World.Size(), want, c.Ctx, c.Ctx.Ranks(), c.Gen, c.Gen.Ranks())
	}
	inst := c.Ctx
	if c.Role == topology.Generation {
		inst = c.Gen
	}
	if c.Rank < 0 || c.Rank >= inst.Ranks() {
		return fmt.Errorf("%w: Rank %d outside the %s instance's 0..%d", ErrConfig, c.Rank, c.Role, inst.Ranks()-1)
	}
	return nil
}

// CorruptAt says which byte of a fragment a corrupt fault flips. The zero
// value flips the payload's middle byte. With At set, each axis of the
// payload picks the fragment's first or its last: block, layer, K or V,
// head, and token; the byte flipped is the first of that token's head
// vector, or its last with LastToken. So {At: true} flips the payload's
// first byte and {At: true, LastBlock, LastLayer, V, LastHead, LastToken}
// its last: faults reach every end of the wire order (kvbytes.go).
type CorruptAt struct {
	At                                           bool
	LastBlock, LastLayer, V, LastHead, LastToken bool
}

// ParseCorruptAt parses a corrupt fault's position: "mid" (the zero
// value), "first", "last", or five axes joined by "/", block/layer/kv/
// head/token, each "first" or "last" (kv: "k" or "v"), e.g.
// "last/first/v/last/first".
func ParseCorruptAt(s string) (CorruptAt, error) {
	switch s {
	case "", "mid":
		return CorruptAt{}, nil
	case "first":
		return CorruptAt{At: true}, nil
	case "last":
		return CorruptAt{At: true, LastBlock: true, LastLayer: true, V: true, LastHead: true, LastToken: true}, nil
	}
	axes := strings.Split(s, "/")
	if len(axes) != 5 {
		return CorruptAt{}, fmt.Errorf("corrupt position %q: want mid, first, last or block/layer/kv/head/token (each first or last; kv k or v), e.g. last/first/v/last/first", s)
	}
	c := CorruptAt{At: true}
	for i, dst := range []*bool{&c.LastBlock, &c.LastLayer, &c.V, &c.LastHead, &c.LastToken} {
		a, b := "first", "last"
		if i == 2 {
			a, b = "k", "v"
		}
		switch axes[i] {
		case a:
		case b:
			*dst = true
		default:
			return CorruptAt{}, fmt.Errorf("corrupt position %q: axis %d (%s) is %q, want %s or %s",
				s, i+1, []string{"block", "layer", "kv", "head", "token"}[i], axes[i], a, b)
		}
	}
	return c, nil
}

func (c CorruptAt) String() string {
	if !c.At {
		return "mid"
	}
	pick := func(last bool, a, b string) string {
		if last {
			return b
		}
		return a
	}
	return strings.Join([]string{pick(c.LastBlock, "first", "last"), pick(c.LastLayer, "first", "last"), pick(c.V, "k", "v"),
		pick(c.LastHead, "first", "last"), pick(c.LastToken, "first", "last")}, "/")
}

// failSend is the fail-send fault for request id: after how many posted
// fragments the send fails (ok false: none).
func (f *Faults) failSend(id request.ID) (after int, ok bool) {
	if f == nil {
		return 0, false
	}
	after, ok = f.FailSend[id]
	return after, ok
}
