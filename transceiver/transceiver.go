package transceiver

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/consensus"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/topology"

	"github.com/rankrun/rankrun/transceiver/internal/wire"
)

// Tags. Control messages (request info, acks, cancels, errors) are one
// header each on tagControl; fragments use a data tag that the GEN rank
// picks per request and announces in its request info.
const (
	tagControl  = 1
	dataTagLow  = DataTagLow
	dataTagHigh = comm.MaxTag
)

// DataTagLow is the least tag a KV fragment travels on: every message on
// a tag at or above it is KV payload (what a simulation that carries a
// sample of each head charges in full, less its header: sim.Config's
// PayloadTagsFrom and PayloadHeader).
const DataTagLow = 16

// HeaderSize is the size of every transfer message's header (the wire
// format, transceiver/internal/wire, is the package's own): a control
// message is this long, a fragment this plus its bytes.
const HeaderSize = wire.HeaderSize

// ErrMalformed is wrapped by the error of a received message that does
// not decode (a corrupted header, a CRC that does not match).
var ErrMalformed = wire.ErrMalformed

// Transceiver is one rank's transfer engine. See the package doc.
type Transceiver struct {
	cfg  Config
	idle bool // the executor's last iteration executed no batch (SetIdle; read only by Replays.DeadlinesWhenBusy)
	// delayed holds the acknowledgements a delay-ack fault holds back
	// (Faults.DelayAck), until they are due.
	delayed  []delayedAck
	yield    func() // between KV blocks (New says when it yields)
	mapping  *topology.Mapping
	shard    topology.Shard
	nCtx     int
	sessions map[request.ID]*session
	order    []*session // session creation order, for stable iteration
	live     []*session // the sessions of order not yet terminal: what Pump moves
	terminal int        // sessions in a terminal state, not yet reaped
	// held: a consensus word per terminal session not yet reaped, ascending
	// by id (this rank's vote, kept as sessions end); unquiesced counts
	// those whose word says a write is still in flight.
	held       consensus.Votes
	unquiesced int
	// CTX: request info that arrived before the session existed.
	pendingInfo map[request.ID][]wire.Header
	everSent    bool
	gather      consensus.Gatherer
	notify      <-chan struct{} // World's completion events (nil: poll)
	ctl         comm.Request
	ctlBuf      []byte
	outbox      []comm.Request
	nextTag     int
	stats       Stats
	// earlyCancel: cancels that arrived before the session existed, by
	// request and peer world rank; finished: recently reaped requests,
	// whose late control messages are ignored.
	earlyCancel map[request.ID]map[int]bool
	finished    map[request.ID]bool
	finishedQ   []request.ID
	bufs        bufPool
	lender      comm.Lender              // World, where it lends bytes (nil: pack and copy)
	progress    func(time.Duration) bool // World's backend, where bytes move only while called
	activeAt    time.Time                // the last message, completion or start seen (WaitEvent's poll backs off from it)
	vector      comm.Vectored            // World, where it sends from and receives into parts (and does not lend): GEN receives straight into its blocks
	closed      bool
	clk         clock.Clock
	waiter      clock.Waiter
}

// New builds a rank's transceiver and posts its control receive.
func New(cfg Config) (*Transceiver, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	mp, err := topology.Map(cfg.Ctx, cfg.Gen, cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	inst := cfg.Ctx
	if cfg.Role == topology.Generation {
		inst = cfg.Gen
	}
	shard, err := inst.Shard(cfg.Model, cfg.Rank)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if bb := cfg.Pool.BlockBytes(); bb != shard.BlockBytes() {
		return nil, fmt.Errorf("%w: Pool block size %d bytes, the %s rank %d shard needs %d", ErrConfig, bb, cfg.Role, cfg.Rank, shard.BlockBytes())
	}
	props := comm.PropsOf(cfg.World)
	t := &Transceiver{
		cfg: cfg, mapping: mp, shard: shard, nCtx: cfg.Ctx.Ranks(),
		sessions: map[request.ID]*session{}, pendingInfo: map[request.ID][]wire.Header{},
		notify: props.Notify, ctlBuf: make([]byte, wire.HeaderSize), nextTag: dataTagLow,
		clk: cfg.Clock, waiter: cfg.Clock.NewWaiter(),
		bufs: bufPool{limit: defaultBufLimit}, earlyCancel: map[request.ID]map[int]bool{}, finished: map[request.ID]bool{},
	}
	t.lender = props.Lender
	if t.lender == nil {
		t.vector = props.Vectored
	}
	t.progress = props.Progress
	// In-process, every rank shares the machine's cores: the long loops
	// over KV blocks yield between blocks so a rank woken by an event runs
	// within microseconds, not after the scheduler's 10 ms preemption
	// slice. Under a backend with its own clock (simulation) ranks run one
	// at a time and wall-clock latency decides nothing: no yield.
	t.yield = runtime.Gosched
	if _, virtual := props.Backend.(interface{ Clock() clock.Clock }); virtual {
		t.yield = func() {}
	}
	if err := t.postControl(); err != nil {
		return nil, err
	}
	return t, nil
}

// Shard is what this rank holds of every request.
func (t *Transceiver) Shard() topology.Shard { return t.shard }

// Stats returns the cumulative counters.
func (t *Transceiver) Stats() Stats {
	s := t.stats
	s.Collectives = t.gather.Collectives()
	return s
}

// Sessions is the number of sessions held (in flight or awaiting consensus).
func (t *Transceiver) Sessions() int { return len(t.sessions) }

// InFlight lists the ids of the sessions held, in creation order.
func (t *Transceiver) InFlight() []request.ID {
	ids := make([]request.ID, len(t.order))
	for i, s := range t.order {
		ids[i] = s.req.ID
	}
	return ids
}

// EverSent reports the sticky "this CTX rank has started a send" flag.
func (t *Transceiver) EverSent() bool { return t.everSent }

func (t *Transceiver) genWorld(r int) int { return t.nCtx + r }

// Pump makes non-blocking progress on every session and on the control
// channel. It never enters a collective.
func (t *Transceiver) Pump() {
	t.pumpControl()
	t.sendDelayedAcks()
	for _, s := range t.live {
		if t.cfg.Role == topology.Context {
			t.progressSend(s)
		} else {
			t.progressRecv(s)
		}
	}
	t.live = slices.DeleteFunc(t.live, func(s *session) bool { return s.state.terminal() })
	// Completed control sends.
	keep := t.outbox[:0]
	for _, q := range t.outbox {
		if _, done, _ := q.Test(); !done {
			keep = append(keep, q)
		}
	}
	clear(t.outbox[len(keep):])
	t.outbox = keep
}

// Notify exposes the backend's completion events (nil without them), so an
// idle executor can wait on intake and transfers together.
func (t *Transceiver) Notify() <-chan struct{} {
	if t.notify == nil {
		return nil
	}
	return t.notify
}

// Close withdraws the control receive and every posted fragment receive.
// Sessions still held are reported in the error (a clean run has none).
func (t *Transceiver) Close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	if t.ctl != nil {
		if err := t.ctl.Cancel(); err != nil {
			// A late control message (an ack or cancel for a transfer
			// already reaped) matched after the last pump: it needs no
			// answer, and the receive is complete, so nothing is left.
			if _, done, _ := t.ctl.Test(); !done {
				errs = append(errs, fmt.Errorf("transceiver: cancel control receive: %w", err))
			}
		}
		t.ctl = nil
	}
	stuck := map[int]bool{}
	for _, s := range t.order {
		t.withdrawAll(s, stuck)
	}
	if n := len(t.sessions); n > 0 {
		errs = append(errs, fmt.Errorf("transceiver: %s rank %d closed with %d sessions in flight: %v", t.cfg.Role, t.cfg.Rank, n, t.InFlight()))
	}
	t.waiter.Stop()
	return errors.Join(errs...)
}

// SetIdle tells the transceiver whether the executor's last iteration
// executed no batch. Only the deadlines-when-busy replay reads it: there
// an idle rank checks no transfer deadline.
func (t *Transceiver) SetIdle(idle bool) { t.idle = idle }

// deadlinePassed reports whether s's transfer deadline has passed, as this
// rank checks it (never while idle under Replays.DeadlinesWhenBusy).
func (t *Transceiver) deadlinePassed(s *session) bool {
	if t.cfg.Replays.DeadlinesWhenBusy && t.idle {
		return false
	}
	return t.clk.Now().After(s.deadline)
}

// OverdueSince is the earliest transfer deadline that passed with nothing
// done about it: a live session past its deadline that no cancel has
// begun for (a pump past the deadline begins one), or the zero time when
// none is. In a healthy run such a session lasts one pump at most; one
// that lasts longer had its deadline never checked (the stall detector's
// last line of defence: the executor's stall verdict).
func (t *Transceiver) OverdueSince() time.Time {
	var since time.Time
	now := t.clk.Now()
	for _, s := range t.live {
		if !s.state.terminal() && !s.cancelling && !s.refused && now.After(s.deadline) && (since.IsZero() || s.deadline.Before(since)) {
			since = s.deadline
		}
	}
	return since
}
