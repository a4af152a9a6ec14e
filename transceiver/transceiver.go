package transceiver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/clock"
	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/consensus"
	"github.com/rankrun/rankrun/gpu"
	"github.com/rankrun/rankrun/topology"
)

// Tags. Control messages (request info, acks, cancels, errors) are one
// header each on tagControl; fragments use a data tag that the GEN rank
// picks per request and announces in its request info.
const (
	tagControl  = 1
	dataTagLow  = 16
	dataTagHigh = comm.MaxTag
)

// State is a session's state (DESIGN.md §5).
type State uint8

// Session states.
const (
	StateInit         State = iota // waiting for peer info
	StateReady                     // peer info known
	StateTransferring              // bytes moving
	StateTransferred               // delivered and acknowledged (terminal)
	StateFailed                    // terminal
	StateCancelled                 // terminal
)

func (s State) String() string {
	return [...]string{"init", "ready", "transferring", "transferred", "failed", "cancelled"}[s]
}

func (s State) terminal() bool { return s >= StateTransferred }

// Reaped describes a transfer whose end the group agreed on.
type Reaped struct {
	ID       gpu.RequestID
	State    State
	Reason   string // why it failed or was cancelled
	Bytes    int64  // payload bytes this rank moved for it
	Verified int64  // payload bytes this rank verified (GEN)
	Started  time.Time
	Terminal time.Time // when this rank saw it terminal
	Reaped   time.Time // when the outcome consensus applied it
}

// Result is what one status check did.
type Result struct {
	Reaped      []Reaped
	PollWait    time.Duration // time spent in the rank-local poll
	Collectives int           // collectives entered by this check
	Skipped     bool          // consensus skipped (CTX that never sent)
}

// Stats are cumulative counters of one transceiver.
type Stats struct {
	BytesSent       int64
	BytesReceived   int64
	BytesVerified   int64
	Completed       int
	Failed          int
	Cancelled       int
	CancelRefused   int // cancel attempts refused while a write was in flight
	LocalFailures   int // sessions that failed or were cancelled on this rank (before any agreement)
	ControlErrors   int // malformed or unexpected control messages
	Collectives     uint64
	StatusChecks    int
	PollWaitTotal   time.Duration
	MaxPollWait     time.Duration
	SessionsCreated int
}

type fragState struct {
	f       topology.Fragment
	peer    int    // world rank of the other side
	dataTag int    // -1 until known (CTX)
	msg     []byte // CTX: the packed message; GEN: the receive buffer
	req     comm.Request
	posted  bool
	done    bool // CTX: send completed; GEN: received and checked
	acked   bool // CTX only
	// withdrawn (GEN): the receive was withdrawn because the peer said it
	// will not send; cancelled (CTX): this rank will not send it.
	withdrawn bool
	cancelled bool
	payload   int
	verified  int
}

type session struct {
	req      Request
	state    State
	reason   string
	frags    []fragState
	lease    gpu.LeaseID
	leased   bool
	blocks   []gpu.BlockID
	started  time.Time
	deadline time.Time
	terminal time.Time
	dataTag  int // GEN
	bytes    int64
	verified int64
	dropped  bool // reaped; removed from order at the end of the check
	// cancelling: this rank asked its peers to cancel (or was asked);
	// the session ends cancelled once no write is in flight.
	cancelling   bool
	cancelReason string
	refused      bool // a cancel was refused while a write was in flight
	// hasBlocks: the request has blocks on this rank (under CP a short
	// request may have none).
	hasBlocks bool
}

// inFlight reports whether a write into or out of the session's blocks may
// still be happening.
func (s *session) inFlight() bool {
	for i := range s.frags {
		if s.frags[i].posted && !s.frags[i].done {
			return true
		}
	}
	return false
}

// Transceiver is one rank's transfer engine. See the package doc.
type Transceiver struct {
	cfg      Config
	mapping  *topology.Mapping
	shard    topology.Shard
	nCtx     int
	sessions map[gpu.RequestID]*session
	order    []*session // session creation order, for stable iteration
	terminal int        // sessions in a terminal state, not yet reaped
	// CTX: request info that arrived before the session existed.
	pendingInfo map[gpu.RequestID][]Header
	everSent    bool
	gather      consensus.Gatherer
	notify      comm.Notifier
	ctl         comm.Request
	ctlBuf      []byte
	outbox      []comm.Request
	nextTag     int
	stats       Stats
	readyBuf    []uint64
	// earlyCancel: cancels that arrived before the session existed, by
	// request and peer world rank; finished: recently reaped requests,
	// whose late control messages are ignored.
	earlyCancel map[gpu.RequestID]map[int]bool
	finished    map[gpu.RequestID]bool
	finishedQ   []gpu.RequestID
	bufs        bufPool
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
	if cfg.Role == Generation {
		inst = cfg.Gen
	}
	shard, err := inst.Shard(cfg.Model, cfg.Rank)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if bb := cfg.Pool.BlockBytes(); bb != shard.BlockBytes() {
		return nil, fmt.Errorf("%w: Pool block size %d bytes, the %s rank %d shard needs %d", ErrConfig, bb, cfg.Role, cfg.Rank, shard.BlockBytes())
	}
	t := &Transceiver{
		cfg: cfg, mapping: mp, shard: shard, nCtx: cfg.Ctx.Ranks(),
		sessions: map[gpu.RequestID]*session{}, pendingInfo: map[gpu.RequestID][]Header{},
		notify: comm.NotifierOf(cfg.World), ctlBuf: make([]byte, HeaderSize), nextTag: dataTagLow,
		clk: cfg.Clock, waiter: cfg.Clock.NewWaiter(),
		bufs: bufPool{limit: defaultBufLimit}, earlyCancel: map[gpu.RequestID]map[int]bool{}, finished: map[gpu.RequestID]bool{},
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
func (t *Transceiver) InFlight() []gpu.RequestID {
	ids := make([]gpu.RequestID, len(t.order))
	for i, s := range t.order {
		ids[i] = s.req.ID
	}
	return ids
}

// EverSent reports the sticky "this CTX rank has started a send" flag.
func (t *Transceiver) EverSent() bool { return t.everSent }

func (t *Transceiver) ctxWorld(r int) int { return r }
func (t *Transceiver) genWorld(r int) int { return t.nCtx + r }

func (t *Transceiver) postControl() error {
	q, err := t.cfg.World.Irecv(t.ctlBuf, comm.AnySource, tagControl)
	if err != nil {
		return fmt.Errorf("transceiver: post control receive: %w", err)
	}
	t.ctl = q
	return nil
}

func (t *Transceiver) sendControl(dest int, h Header) error {
	msg := EncodeMessage(nil, h, nil)
	q, err := t.cfg.World.Isend(msg, dest, tagControl)
	if err != nil {
		return fmt.Errorf("transceiver: send %s to world rank %d: %w", h.Kind, dest, err)
	}
	t.outbox = append(t.outbox, q)
	return nil
}

func (t *Transceiver) addSession(s *session) {
	t.sessions[s.req.ID] = s
	t.order = append(t.order, s)
	t.stats.SessionsCreated++
}

// dropSession forgets a reaped session; compactOrder removes it from the
// iteration order (once per status check, not once per session).
func (t *Transceiver) dropSession(s *session) {
	delete(t.sessions, s.req.ID)
	if s.state.terminal() {
		t.terminal--
	}
	s.dropped = true
}

func (t *Transceiver) compactOrder() {
	t.order = slices.DeleteFunc(t.order, func(s *session) bool { return s.dropped })
}

func (t *Transceiver) setTerminal(s *session, st State, reason string) {
	if s.state.terminal() {
		return
	}
	s.state = st
	s.reason = reason
	s.terminal = t.clk.Now()
	t.terminal++
	if st != StateTransferred {
		t.stats.LocalFailures++
	}
	if st != StateTransferred {
		t.cfg.Log.Debug("transfer ended", zap.Uint64("request", uint64(s.req.ID)), zap.Stringer("state", st), zap.String("reason", reason))
	}
}

// canStart checks that op may open a session for id on this rank: the right
// role, not closed, no session for id yet.
func (t *Transceiver) canStart(role Role, op string, id gpu.RequestID) error {
	if t.cfg.Role != role {
		return fmt.Errorf("%w: %s on a %s rank", ErrConfig, op, t.cfg.Role)
	}
	if t.closed {
		return ErrClosed
	}
	if _, ok := t.sessions[id]; ok {
		return fmt.Errorf("%w: %s: request %d already has a session on this %s rank", ErrDuplicate, op, id, t.cfg.Role)
	}
	return nil
}

// StartSend opens the CTX send session of req after its prefill: it leases
// the request's blocks (already allocated in Pool and filled) and sends each
// fragment as soon as the GEN rank's request info is known. Every CTX rank
// of the request's executor group calls it for the same requests in the same
// iteration, which makes the "ever sent" flag flip on all of them together.
func (t *Transceiver) StartSend(req Request) error {
	if err := t.canStart(Context, "StartSend", req.ID); err != nil {
		return err
	}
	if got, want := len(t.cfg.Pool.Blocks(req.ID)), t.shard.BlocksFor(req.Tokens); got != want {
		return fmt.Errorf("%w: request %d holds %d blocks on ctx rank %d, its %d tokens need %d", ErrUnknown, req.ID, got, t.cfg.Rank, req.Tokens, want)
	}
	now := t.clk.Now()
	s := &session{req: req, started: now, deadline: now.Add(t.cfg.TransferTimeout)}
	if t.shard.BlocksFor(req.Tokens) > 0 {
		// Under CP a short request may have no block on this rank: then
		// there is nothing to pin, and nothing to send.
		lease, err := t.cfg.Pool.Lease(req.ID)
		if err != nil {
			return fmt.Errorf("transceiver: lease request %d: %w", req.ID, err)
		}
		s.lease, s.leased, s.blocks, s.hasBlocks = lease, true, t.cfg.Pool.Blocks(req.ID), true
	}
	for _, f := range t.mapping.CtxFragments(req.CtxDP, req.GenDP, t.cfg.Rank) {
		s.frags = append(s.frags, fragState{f: f, peer: t.genWorld(f.GenRank), dataTag: -1})
	}
	t.everSent = true
	t.addSession(s)
	for _, h := range t.pendingInfo[req.ID] {
		t.applyInfo(s, h)
	}
	delete(t.pendingInfo, req.ID)
	if len(s.frags) == 0 {
		// This rank holds only duplicated heads another rank sends.
		t.setTerminal(s, StateTransferred, "")
	}
	for g, failed := range t.earlyCancel[req.ID] {
		if failed {
			t.peerFailed(s, g)
		}
		t.ctxPeerCancelled(s, g)
	}
	delete(t.earlyCancel, req.ID)
	if t.cfg.Faults != nil && t.cfg.Faults.Cancel[req.ID] {
		t.tryCancel(s, "cancelled on this rank (injected)")
	}
	t.progressSend(s)
	return nil
}

// StartReceive opens the GEN receive session of req: it allocates the
// destination blocks (ErrNoSpace when they do not fit now), posts a receive
// for every expected fragment and sends request info to the CTX peers.
func (t *Transceiver) StartReceive(req Request) error {
	if err := t.canStart(Generation, "StartReceive", req.ID); err != nil {
		return err
	}
	n := t.shard.BlocksFor(req.Tokens)
	var blocks []gpu.BlockID
	if n > 0 {
		var err error
		if blocks, err = t.cfg.Pool.TryAllocate(req.ID, n); err != nil {
			return fmt.Errorf("%w: request %d needs %d blocks on gen rank %d: %w", ErrNoSpace, req.ID, n, t.cfg.Rank, err)
		}
	}
	now := t.clk.Now()
	s := &session{req: req, blocks: blocks, hasBlocks: n > 0, started: now, deadline: now.Add(t.cfg.TransferTimeout), dataTag: t.allocTag()}
	totalBlocks := t.cfg.Model.Blocks(req.Tokens)
	for _, f := range t.mapping.Fragments(req.CtxDP, req.GenDP) {
		if f.GenRank != t.cfg.Rank {
			continue
		}
		payload := t.mapping.FragmentBytes(f, f.BlockCount(totalBlocks))
		fs := fragState{f: f, peer: t.ctxWorld(f.CtxRank), dataTag: s.dataTag, payload: payload}
		if failed, ok := t.earlyCancel[req.ID][fs.peer]; ok {
			// That CTX rank cancelled before we started: it will not send.
			if failed {
				t.peerFailed(s, fs.peer)
			}
			fs.done, fs.withdrawn = true, true
			s.frags = append(s.frags, fs)
			continue
		}
		fs.msg = t.bufs.get(HeaderSize + payload)
		q, err := t.cfg.World.Irecv(fs.msg, fs.peer, s.dataTag)
		if err != nil {
			t.withdrawAll(s)
			if n > 0 {
				_ = t.cfg.Pool.Release(req.ID)
			}
			return fmt.Errorf("transceiver: post fragment receive for request %d: %w", req.ID, err)
		}
		fs.req, fs.posted = q, true
		s.frags = append(s.frags, fs)
	}
	t.addSession(s)
	// Request info goes to every CTX rank of the request's DP index, so
	// that ranks with nothing to send for us still learn the request.
	peers := map[int]bool{}
	for _, f := range s.frags {
		if !f.withdrawn {
			peers[f.f.CtxRank] = true
		}
	}
	for _, p := range slices.Sorted(maps.Keys(peers)) {
		h := Header{Kind: KindRequestInfo, RequestID: uint64(req.ID), Sender: int32(t.cfg.Rank),
			Fragment: uint32(s.dataTag), BlockCount: uint32(totalBlocks)}
		if err := t.sendControl(t.ctxWorld(p), h); err != nil {
			return err
		}
	}
	s.state = StateTransferring
	if len(s.frags) == 0 {
		t.setTerminal(s, StateTransferred, "")
	}
	if len(t.earlyCancel[req.ID]) > 0 {
		t.genCancel(s, "a ctx rank cancelled before this gen rank started")
	}
	delete(t.earlyCancel, req.ID)
	if t.cfg.Faults != nil && t.cfg.Faults.Cancel[req.ID] {
		t.tryCancel(s, "cancelled on this rank (injected)")
	}
	return nil
}

func (t *Transceiver) allocTag() int {
	// Tags cycle; a tag is reused only after ~32k later requests, long
	// after the transfer that used it ended.
	tag := t.nextTag
	t.nextTag++
	if t.nextTag > dataTagHigh {
		t.nextTag = dataTagLow
	}
	return tag
}

// withdrawFrom withdraws the session's unmatched receives from CTX peer
// (GEN), which said it will not send. A receive that already matched stays:
// its bytes arrive and are acknowledged.
func (t *Transceiver) withdrawFrom(s *session, peer int) {
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.peer != peer || !fs.posted || fs.done {
			continue
		}
		if err := fs.req.Cancel(); err != nil {
			continue // matched: it completes as a receive
		}
		fs.done, fs.withdrawn = true, true
		t.bufs.put(fs.msg) // nothing writes a withdrawn receive
		fs.msg = nil
	}
}

// withdrawAll withdraws every unmatched receive (shutdown only).
func (t *Transceiver) withdrawAll(s *session) {
	for i := range s.frags {
		if fs := &s.frags[i]; fs.posted && !fs.done {
			t.withdrawFrom(s, fs.peer)
		}
	}
}

// genCancel starts cancelling a receive session: every CTX peer that may
// still send is asked to cancel. Its receives stay posted until the peer
// either sends (the bytes are received) or confirms it will not
// (CancelAck): withdrawing a receive a peer may still match would strand
// that peer's send forever.
func (t *Transceiver) genCancel(s *session, why string) {
	if s.cancelling || s.state.terminal() {
		return
	}
	s.cancelling, s.cancelReason = true, why
	asked := map[int]bool{}
	for _, fs := range s.frags {
		if !fs.done && !asked[fs.peer] {
			asked[fs.peer] = true
			_ = t.sendControl(fs.peer, Header{Kind: KindCancel, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank), Status: s.cancelStatus()})
		}
	}
}

// ctxPeerCancelled applies a cancel from GEN peer g to a send session: the
// fragments for g not yet posted will not be sent (CancelAck tells g), and
// the cancel spreads to the other GEN peers this rank has not sent to yet.
// Fragments already posted complete normally (g keeps their receives).
func (t *Transceiver) ctxPeerCancelled(s *session, g int) {
	if s.state.terminal() {
		return
	}
	if !s.cancelling {
		s.cancelling, s.cancelReason = true, fmt.Sprintf("gen rank %d cancelled", g-t.nCtx)
	}
	t.ctxStopSending(s, g, KindCancelAck)
	for _, fs := range s.frags {
		if fs.peer != g {
			t.ctxStopSending(s, fs.peer, KindCancel)
		}
	}
}

// ctxStopSending cancels the fragments for GEN peer g when none of them has
// been posted, and tells g with kind (Cancel or CancelAck). If one was
// posted, the rest are sent too: g then keeps all of its receives.
func (t *Transceiver) ctxStopSending(s *session, g int, kind Kind) {
	changed := false
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.peer != g {
			continue
		}
		if fs.posted {
			return
		}
		if !fs.cancelled {
			changed = true
		}
	}
	if !changed {
		return
	}
	for i := range s.frags {
		if fs := &s.frags[i]; fs.peer == g {
			fs.cancelled = true
		}
	}
	_ = t.sendControl(g, Header{Kind: kind, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank), Status: s.cancelStatus()})
}

// cancelStatus is the status a Cancel or CancelAck carries: CodeFailed
// when the session failed (so that every rank records a failure, not a
// cancel, and the group's outcome is the same whatever the timing),
// CodeCancelled otherwise.
func (s *session) cancelStatus() StatusCode {
	if s.reason != "" {
		return CodeFailed
	}
	return CodeCancelled
}

// peerFailed records that peer (a world rank) reported the transfer failed.
func (t *Transceiver) peerFailed(s *session, peer int) {
	if s.reason == "" {
		s.reason = fmt.Sprintf("peer world rank %d reported the transfer failed", peer)
	}
}

// noteFinished remembers a reaped request so that late control messages
// for it are recognised (bounded).
func (t *Transceiver) noteFinished(id gpu.RequestID) {
	const keep = 8192
	t.finished[id] = true
	t.finishedQ = append(t.finishedQ, id)
	if len(t.finishedQ) > keep {
		delete(t.finished, t.finishedQ[0])
		t.finishedQ = t.finishedQ[1:]
	}
	delete(t.pendingInfo, id)
	delete(t.earlyCancel, id)
}

// Pump makes non-blocking progress on every session and on the control
// channel. It never enters a collective.
func (t *Transceiver) Pump() {
	t.pumpControl()
	for _, s := range t.order {
		if t.cfg.Role == Context {
			t.progressSend(s)
		} else {
			t.progressRecv(s)
		}
	}
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

func (t *Transceiver) pumpControl() {
	for t.ctl != nil {
		st, done, err := t.ctl.Test()
		if !done {
			return
		}
		if err != nil {
			t.stats.ControlErrors++
			t.cfg.Log.Warn("control receive failed", zap.Error(err))
		} else {
			t.handleControl(st.Source, t.ctlBuf[:st.Len])
		}
		if err := t.postControl(); err != nil {
			t.cfg.Log.Error("cannot repost control receive", zap.Error(err))
			t.ctl = nil
		}
	}
}

func (t *Transceiver) handleControl(src int, msg []byte) {
	h, _, err := DecodeMessage(msg)
	if err != nil {
		t.stats.ControlErrors++
		t.cfg.Log.Warn("malformed control message", zap.Int("from", src), zap.Error(err))
		return
	}
	id := gpu.RequestID(h.RequestID)
	s := t.sessions[id]
	switch {
	case h.Kind == KindRequestInfo && t.cfg.Role == Context:
		if s == nil {
			if t.finished[id] {
				return // a late info for a transfer this rank already ended
			}
			t.pendingInfo[id] = append(t.pendingInfo[id], h)
			return
		}
		t.applyInfo(s, h)
	case h.Kind == KindAck && t.cfg.Role == Context:
		if s == nil {
			if !t.finished[id] {
				t.stats.ControlErrors++
				t.cfg.Log.Warn("ack for an unknown request", zap.Uint64("request", h.RequestID), zap.Int("from", src))
			}
			return
		}
		for i := range s.frags {
			fs := &s.frags[i]
			if fs.peer == src && !fs.acked {
				fs.acked = true
				if h.Status != CodeOK && !s.state.terminal() {
					s.reason = fmt.Sprintf("gen rank %d rejected the fragment: %s", src-t.nCtx, h.Status)
				}
				break
			}
		}
	case h.Kind == KindCancel:
		if s == nil {
			if !t.finished[id] {
				if t.earlyCancel[id] == nil {
					t.earlyCancel[id] = map[int]bool{}
				}
				// The value says whether the peer reported a failure.
				t.earlyCancel[id][src] = t.earlyCancel[id][src] || h.Status == CodeFailed
			}
			return
		}
		if s.state.terminal() {
			return
		}
		if h.Status == CodeFailed {
			t.peerFailed(s, src)
		}
		if t.cfg.Role == Generation {
			// A CTX peer sends Cancel only for fragments it never posted.
			t.withdrawFrom(s, src)
			t.genCancel(s, fmt.Sprintf("ctx rank %d cancelled", src))
		} else {
			t.ctxPeerCancelled(s, src)
		}
	case h.Kind == KindCancelAck && t.cfg.Role == Generation:
		if s != nil && !s.state.terminal() {
			if h.Status == CodeFailed {
				t.peerFailed(s, src)
			}
			t.withdrawFrom(s, src)
		}
	case h.Kind == KindError:
		if s != nil && !s.state.terminal() {
			s.reason = fmt.Sprintf("peer world rank %d reported %s", src, h.Status)
			if t.cfg.Role == Generation {
				// An error is not "I will not send": the peer may have
				// posted its fragment already. Ask it to cancel; it sends
				// or confirms, as for any cancel.
				t.genCancel(s, s.reason)
			}
		}
	default:
		t.stats.ControlErrors++
		t.cfg.Log.Warn("unexpected control message", zap.Stringer("kind", h.Kind), zap.Int("from", src))
	}
}

func (t *Transceiver) applyInfo(s *session, h Header) {
	g := t.genWorld(int(h.Sender))
	matched := false
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.peer == g {
			if fs.dataTag >= 0 {
				t.stats.ControlErrors++
				t.cfg.Log.Warn("duplicate request info", zap.Uint64("request", h.RequestID), zap.Int32("gen", h.Sender))
				_ = t.sendControl(g, Header{Kind: KindError, RequestID: h.RequestID, Sender: int32(t.cfg.Rank), Status: CodeDuplicate})
				return
			}
			fs.dataTag = int(h.Fragment)
			matched = true
		}
	}
	if !matched && len(s.frags) > 0 {
		// A GEN rank this CTX rank sends nothing to; nothing to do.
		return
	}
	if s.state == StateInit {
		s.state = StateReady
	}
}

// progressSend packs and posts every fragment whose peer is known, tests
// posted sends, and decides terminal states. Only the acknowledgement
// completes a fragment.
func (t *Transceiver) progressSend(s *session) {
	if s.state.terminal() {
		return
	}
	resolved := true
	for i := range s.frags {
		fs := &s.frags[i]
		if !fs.posted && !fs.cancelled && fs.dataTag >= 0 && s.reason == "" && !s.cancelling &&
			(t.cfg.Faults == nil || !t.cfg.Faults.Withhold[s.req.ID]) {
			if err := t.postFragment(s, fs); err != nil {
				s.reason = err.Error()
			}
		}
		if fs.posted && !fs.done {
			if _, done, err := fs.req.Test(); done {
				fs.done = true
				t.bufs.put(fs.msg)
				fs.msg = nil
				if err != nil && s.reason == "" {
					s.reason = err.Error()
				}
			}
		}
		// A fragment is settled when it will not be sent, or when it was
		// delivered and acknowledged (or a cancel stopped the wait for
		// the acknowledgement: the bytes left, nothing is in flight).
		if !fs.cancelled && !(fs.posted && fs.done && (fs.acked || s.cancelling)) {
			resolved = false
		}
	}
	switch {
	case s.inFlight():
		if t.clk.Now().After(s.deadline) && !s.cancelling && !s.refused {
			s.refused = true // counted once; the cancel is retried every pump
			t.stats.CancelRefused++
		}
	case s.reason != "":
		// Every GEN peer must get its bytes or a Cancel: tell the ones
		// this rank never sent to before the session ends.
		t.stopAll(s)
		t.setTerminal(s, StateFailed, s.reason)
	case resolved && s.cancelling:
		t.setTerminal(s, StateCancelled, s.cancelReason)
	case resolved:
		t.setTerminal(s, StateTransferred, "")
	case t.clk.Now().After(s.deadline):
		t.tryCancel(s, "transfer deadline passed")
	}
}

// tryCancel asks to cancel a session. It is refused (and retried by the
// caller's next pump) while a write is in flight. CTX: fragments not yet
// sent are cancelled and their GEN peers told. GEN: the CTX peers are asked
// to cancel; the session ends once each has sent or confirmed.
func (t *Transceiver) tryCancel(s *session, why string) {
	if s.state.terminal() {
		return
	}
	if t.cfg.Role == Generation {
		t.genCancel(s, why)
		return
	}
	if s.inFlight() {
		t.stats.CancelRefused++
		return
	}
	if !s.cancelling {
		s.cancelling, s.cancelReason = true, why
	}
	t.stopAll(s)
	t.progressSend(s)
}

// stopAll cancels, and announces to their GEN peers, every fragment of a
// send session that was not posted.
func (t *Transceiver) stopAll(s *session) {
	peers := map[int]bool{}
	for _, fs := range s.frags {
		peers[fs.peer] = true
	}
	for _, g := range slices.Sorted(maps.Keys(peers)) {
		t.ctxStopSending(s, g, KindCancel)
	}
}

func (t *Transceiver) postFragment(s *session, fs *fragState) error {
	totalBlocks := t.cfg.Model.Blocks(s.req.Tokens)
	payload := t.mapping.FragmentBytes(fs.f, fs.f.BlockCount(totalBlocks))
	msg := t.bufs.get(HeaderSize + payload)
	p := msg[HeaderSize:HeaderSize]
	run := t.shard.RunBytes(fs.f.HeadLo, fs.f.HeadHi)
	for b := fs.f.BlockRem; b < totalBlocks; b += fs.f.BlockMod {
		local, ok := t.shard.LocalBlock(b)
		if !ok {
			return fmt.Errorf("fragment %s covers block %d that ctx rank %d does not hold", fs.f, b, t.cfg.Rank)
		}
		blk := t.cfg.Pool.Block(s.blocks[local])
		for layer := fs.f.LayerLo; layer < fs.f.LayerHi; layer++ {
			for kv := topology.K; kv <= topology.V; kv++ {
				off := t.shard.Offset(layer, kv, fs.f.HeadLo, 0)
				p = append(p, blk[off:off+run]...)
			}
		}
		runtime.Gosched() // see Prefill: let woken ranks run between blocks
	}
	if len(p) != payload {
		return fmt.Errorf("fragment %s packed %d bytes, expected %d", fs.f, len(p), payload)
	}
	if t.cfg.Faults != nil && t.cfg.Faults.CorruptFragment[s.req.ID] && payload > 0 {
		p[payload/2] ^= 0xFF
	}
	h := Header{Kind: KindFragment, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank),
		LayerLo: uint16(fs.f.LayerLo), LayerHi: uint16(fs.f.LayerHi), HeadLo: uint16(fs.f.HeadLo), HeadHi: uint16(fs.f.HeadHi),
		BlockMod: uint16(fs.f.BlockMod), BlockRem: uint16(fs.f.BlockRem), BlockCount: uint32(totalBlocks)}
	// The payload is already in place after the header: write the header
	// in front of it instead of copying the payload again.
	h.PayloadLen = uint32(payload)
	if err := h.Put(msg[:HeaderSize]); err != nil {
		return fmt.Errorf("fragment header: %w", err)
	}
	q, err := t.cfg.World.Isend(msg, fs.peer, fs.dataTag)
	if err != nil {
		return fmt.Errorf("send fragment to world rank %d: %w", fs.peer, err)
	}
	fs.msg, fs.req, fs.posted, fs.payload = msg, q, true, payload
	s.bytes += int64(payload)
	t.stats.BytesSent += int64(payload)
	if s.state < StateTransferring {
		s.state = StateTransferring
	}
	return nil
}

// progressRecv tests posted fragment receives, verifies and unpacks what
// arrived, acknowledges it, and decides terminal states.
func (t *Transceiver) progressRecv(s *session) {
	if s.state.terminal() {
		return
	}
	all, withdrawn := true, false
	for i := range s.frags {
		fs := &s.frags[i]
		if fs.posted && !fs.done {
			st, done, err := fs.req.Test()
			if done {
				fs.done = true
				status := CodeOK
				if err == nil {
					err = t.acceptFragment(s, fs, fs.msg[:st.Len])
				}
				if err != nil {
					status = CodeVerify
					if s.reason == "" {
						s.reason = err.Error()
					}
				}
				t.bufs.put(fs.msg)
				fs.msg = nil
				if t.cfg.Faults == nil || !t.cfg.Faults.DropAck[s.req.ID] {
					_ = t.sendControl(fs.peer, Header{Kind: KindAck, RequestID: uint64(s.req.ID), Sender: int32(t.cfg.Rank), Status: status})
				}
			}
		}
		if !fs.done {
			all = false
		}
		if fs.withdrawn {
			withdrawn = true
		}
	}
	switch {
	case !all:
		if t.clk.Now().After(s.deadline) {
			t.genCancel(s, "transfer deadline passed")
		}
	case s.reason != "":
		t.setTerminal(s, StateFailed, s.reason)
	case s.cancelling || withdrawn:
		// Only a fragment actually received counts: a withdrawn one
		// makes the transfer cancelled, never transferred.
		why := s.cancelReason
		if why == "" {
			why = "a ctx rank cancelled"
		}
		t.setTerminal(s, StateCancelled, why)
	case t.cfg.Faults != nil && t.cfg.Faults.FailReceive[s.req.ID]:
		t.setTerminal(s, StateFailed, "injected rank-local receive failure")
	default:
		t.setTerminal(s, StateTransferred, "")
	}
}

// acceptFragment checks a received fragment's header against what was
// expected, verifies every byte of the pattern and unpacks it.
func (t *Transceiver) acceptFragment(s *session, fs *fragState, msg []byte) error {
	h, payload, err := DecodeMessage(msg)
	if err != nil {
		return fmt.Errorf("fragment from ctx rank %d: %w", fs.f.CtxRank, err)
	}
	f := fs.f
	if h.Kind != KindFragment || gpu.RequestID(h.RequestID) != s.req.ID || int(h.LayerLo) != f.LayerLo || int(h.LayerHi) != f.LayerHi ||
		int(h.HeadLo) != f.HeadLo || int(h.HeadHi) != f.HeadHi || int(h.BlockMod) != f.BlockMod || int(h.BlockRem) != f.BlockRem {
		return fmt.Errorf("fragment from ctx rank %d: header %+v does not match the expected %s of request %d", f.CtxRank, h, f, s.req.ID)
	}
	if len(payload) != fs.payload {
		return fmt.Errorf("fragment from ctx rank %d: %d payload bytes, expected %d", f.CtxRank, len(payload), fs.payload)
	}
	t.stats.BytesReceived += int64(len(payload))
	s.bytes += int64(len(payload))
	run := t.shard.RunBytes(f.HeadLo, f.HeadHi)
	totalBlocks := t.cfg.Model.Blocks(s.req.Tokens)
	pos := 0
	for b := f.BlockRem; b < totalBlocks; b += f.BlockMod {
		local, ok := t.shard.LocalBlock(b)
		if !ok {
			return fmt.Errorf("fragment %s covers block %d that gen rank %d does not hold", f, b, t.cfg.Rank)
		}
		blk := t.cfg.Pool.Block(s.blocks[local])
		for layer := f.LayerLo; layer < f.LayerHi; layer++ {
			for kv := topology.K; kv <= topology.V; kv++ {
				off := t.shard.Offset(layer, kv, f.HeadLo, 0)
				copy(blk[off:off+run], payload[pos:pos+run])
				pos += run
			}
		}
		if l, kv, head, tok, ok := VerifyBlock(blk, t.shard, uint64(s.req.ID), b, f.LayerLo, f.LayerHi, f.HeadLo, f.HeadHi); !ok {
			return fmt.Errorf("request %d block %d from ctx rank %d: layer %d %v head %d token %d does not hold the expected bytes",
				s.req.ID, b, f.CtxRank, l, kv, head, tok)
		}
		runtime.Gosched() // see Prefill: let woken ranks run between blocks
	}
	s.verified += int64(len(payload))
	t.stats.BytesVerified += int64(len(payload))
	return nil
}

// ReceiveSync blocks this GEN rank in a rank-local receive until request
// id's session is terminal on this rank or ctx ends (sync transfer mode).
// It never enters a collective; the group agrees later in a status check.
func (t *Transceiver) ReceiveSync(ctx context.Context, id gpu.RequestID) error {
	s := t.sessions[id]
	if s == nil {
		return fmt.Errorf("%w: no receive session for request %d", ErrUnknown, id)
	}
	for {
		t.Pump()
		if s.state.terminal() {
			return nil
		}
		// Past the deadline the session is being cancelled and its
		// peers' answers are awaited: keep waiting on events, not spinning.
		wake := s.deadline
		if floor := t.clk.Now().Add(time.Millisecond); wake.Before(floor) {
			wake = floor
		}
		if err := t.WaitEvent(ctx, wake); err != nil {
			return err
		}
	}
}

// WaitEvent sleeps until a communication event of this rank (a request
// posted by it completed), the deadline, or ctx ends; it returns at once
// when the deadline has passed. Backends without completion events (MPI)
// are polled: it returns after a short pause. The executor, which owns the
// transceiver on the same goroutine, waits through it too.
func (t *Transceiver) WaitEvent(ctx context.Context, deadline time.Time) error {
	d := deadline.Sub(t.clk.Now())
	if d <= 0 {
		return ctx.Err()
	}
	if t.notify == nil {
		comm.PollPause(min(d, 50*time.Microsecond))
		return ctx.Err()
	}
	return t.waiter.Wait(ctx, t.notify.Notify(), deadline)
}

// Notify exposes the backend's completion events (nil without them), so an
// idle executor can wait on intake and transfers together.
func (t *Transceiver) Notify() <-chan struct{} {
	if t.notify == nil {
		return nil
	}
	return t.notify.Notify()
}

// poll is phase 1: the bounded, rank-local poll. It waits until target of
// this rank's sessions are terminal or interval passes, pumping progress,
// and never enters a collective.
func (t *Transceiver) poll(ctx context.Context, atLeast int, interval time.Duration) time.Duration {
	start := t.clk.Now()
	target := atLeast
	if !t.cfg.Replays.UnclampedPoll {
		// The clamp (seed 000): never wait for more sessions than are held.
		target = min(atLeast, len(t.sessions))
	}
	deadline := start.Add(interval)
	for {
		t.Pump()
		if target <= 0 || t.terminalCount() >= target {
			break
		}
		if !t.clk.Now().Before(deadline) {
			break
		}
		if t.WaitEvent(ctx, deadline) != nil {
			break
		}
	}
	return clock.Since(t.clk, start)
}

func (t *Transceiver) terminalCount() int { return t.terminal }

// CheckContextTransferStatus is a CTX status check: a bounded local poll for
// atLeast sessions (clamped), then ready-id and outcome consensus over the
// CTX scope, then the agreed outcomes are applied: leases end and blocks are
// freed. A CTX rank that never sent skips the consensus; the flag is sticky
// and flips on every rank of the group together, so skipping is uniform.
func (t *Transceiver) CheckContextTransferStatus(ctx context.Context, atLeast int) (Result, error) {
	if t.cfg.Role != Context {
		return Result{}, fmt.Errorf("%w: CheckContextTransferStatus on a %s rank", ErrConfig, t.cfg.Role)
	}
	return t.check(ctx, atLeast, t.cfg.SenderWaitSlice, t.cfg.Scope)
}

// CheckGenTransferStatus is the GEN status check. GEN always enters the
// consensus (with an empty vote when it holds nothing): its group needs it.
func (t *Transceiver) CheckGenTransferStatus(ctx context.Context, atLeast int) (Result, error) {
	if t.cfg.Role != Generation {
		return Result{}, fmt.Errorf("%w: CheckGenTransferStatus on a %s rank", ErrConfig, t.cfg.Role)
	}
	return t.check(ctx, atLeast, t.cfg.GenPollInterval, t.cfg.Scope)
}

// CheckStatusOver is a status check (either role) whose consensus runs over
// scope instead of the rank's own. Only the unsafe-idle-reap replay uses
// it, to bring back a check whose collectives span the executor group.
func (t *Transceiver) CheckStatusOver(ctx context.Context, atLeast int, scope []comm.Comm) (Result, error) {
	interval := t.cfg.SenderWaitSlice
	if t.cfg.Role == Generation {
		interval = t.cfg.GenPollInterval
	}
	return t.check(ctx, atLeast, interval, scope)
}

// TerminalHeld counts sessions that are over on this rank but not yet
// reaped by a consensus: their blocks stay pinned until a status check.
func (t *Transceiver) TerminalHeld() int { return t.terminalCount() }

// check is phases 1-3. Its results are named so that the deferred count
// of collectives reaches the caller on every return.
func (t *Transceiver) check(ctx context.Context, atLeast int, interval time.Duration, scope []comm.Comm) (res Result, err error) {
	t.stats.StatusChecks++
	res.PollWait = t.poll(ctx, atLeast, interval)
	t.stats.PollWaitTotal += res.PollWait
	t.stats.MaxPollWait = max(t.stats.MaxPollWait, res.PollWait)
	if t.cfg.Role == Context && !t.everSent {
		res.Skipped = true
		return res, nil
	}
	before := t.gather.Collectives()
	defer func() { res.Collectives = int(t.gather.Collectives() - before) }()

	ready := t.readyBuf[:0]
	if t.terminal > 0 {
		for _, s := range t.order {
			if s.state.terminal() {
				ready = append(ready, uint64(s.req.ID))
			}
		}
	}
	t.readyBuf = ready
	agreed, err := t.gather.ReadyIDs(ctx, scope, ready)
	if err != nil {
		return res, fmt.Errorf("transceiver: %s rank %d ready-id consensus: %w", t.cfg.Role, t.cfg.Rank, err)
	}
	if len(agreed) == 0 {
		// Nothing is over on every rank: the outcome would be empty on
		// every rank. The agreed set is identical on every rank of the
		// scope, so skipping phase 3 here is rank-uniform.
		return res, nil
	}
	var vote consensus.Vote
	for _, id := range agreed {
		s := t.sessions[gpu.RequestID(id)]
		if s == nil {
			// Cannot happen: agreed ids are in every rank's ready list.
			return res, fmt.Errorf("transceiver: agreed id %d has no session on %s rank %d", id, t.cfg.Role, t.cfg.Rank)
		}
		switch s.state {
		case StateCancelled:
			vote.Cancelled = append(vote.Cancelled, id)
		case StateFailed:
			vote.Failed = append(vote.Failed, id)
		case StateTransferred:
			vote.Completed = append(vote.Completed, id)
		}
		if !s.inFlight() {
			vote.Quiesced = append(vote.Quiesced, id)
		}
	}
	out, err := t.gather.Outcome(ctx, scope, vote)
	if err != nil {
		return res, fmt.Errorf("transceiver: %s rank %d outcome consensus: %w", t.cfg.Role, t.cfg.Rank, err)
	}
	defer t.compactOrder()
	now := t.clk.Now()
	quiesced := map[uint64]bool{}
	for _, id := range out.Quiesced {
		quiesced[id] = true
	}
	apply := func(ids []uint64, st State) error {
		for _, id := range ids {
			if !quiesced[id] {
				continue // a write is still in flight somewhere: next check
			}
			s := t.sessions[gpu.RequestID(id)]
			reason := s.reason
			if st != s.state && reason == "" {
				reason = fmt.Sprintf("%s on another rank of the group", st)
			}
			if err := t.finish(s, st); err != nil {
				return err
			}
			res.Reaped = append(res.Reaped, Reaped{ID: s.req.ID, State: st, Reason: reason, Bytes: s.bytes, Verified: s.verified,
				Started: s.started, Terminal: s.terminal, Reaped: now})
		}
		return nil
	}
	if err := apply(out.Cancelled, StateCancelled); err != nil {
		return res, err
	}
	if err := apply(out.Failed, StateFailed); err != nil {
		return res, err
	}
	if err := apply(out.Completed, StateTransferred); err != nil {
		return res, err
	}
	return res, nil
}

// finish applies an agreed outcome: CTX ends the lease and frees the
// blocks (the reap of seed 001); GEN frees the blocks of a failed or
// cancelled transfer and keeps those of a completed one for decoding (the
// caller releases them with Pool.Release when the request is done).
func (t *Transceiver) finish(s *session, st State) error {
	switch st {
	case StateTransferred:
		t.stats.Completed++
	case StateFailed:
		t.stats.Failed++
	case StateCancelled:
		t.stats.Cancelled++
	}
	t.dropSession(s)
	t.noteFinished(s.req.ID)
	if s.leased {
		if err := t.cfg.Pool.EndLease(s.lease); err != nil {
			return fmt.Errorf("transceiver: end lease of request %d: %w", s.req.ID, err)
		}
		s.leased = false
	}
	if s.hasBlocks && (t.cfg.Role == Context || st != StateTransferred) {
		if err := t.cfg.Pool.Release(s.req.ID); err != nil {
			return fmt.Errorf("transceiver: release blocks of request %d: %w", s.req.ID, err)
		}
	}
	return nil
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
	for _, s := range t.order {
		t.withdrawAll(s)
	}
	if n := len(t.sessions); n > 0 {
		errs = append(errs, fmt.Errorf("transceiver: %s rank %d closed with %d sessions in flight: %v", t.cfg.Role, t.cfg.Rank, n, t.InFlight()))
	}
	t.waiter.Stop()
	return errors.Join(errs...)
}
