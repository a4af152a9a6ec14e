package transceiver

import (
	"fmt"
	"slices"
	"time"

	"github.com/rankrun/rankrun/consensus"
	"github.com/rankrun/rankrun/request"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/topology"
	"go.uber.org/zap"

	"github.com/rankrun/rankrun/transceiver/internal/wire"
)

type fragState struct {
	f       topology.Fragment
	peer    int       // world rank of the other side
	dataTag int       // -1 until known (CTX)
	msg     []byte    // CTX: the packed message (or, lending, its header); GEN: the receive buffer
	parts   [][]byte  // CTX, lending: header then the runs, straight from the blocks
	loan    comm.Loan // GEN, lending: the receive (also req)
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
	// --verify checksum. GEN: hash is the digest of the bytes as they
	// arrived (set with awaitDigest until the sender's digest is here
	// too); digest the sender's (haveDigest); digestErr a mismatch. CTX:
	// digest is the one to send, due once the fragment left (digestDue;
	// digestLent: hashed from the blocks then, not while packing).
	hash, digest digest
	awaitDigest  bool
	haveDigest   bool
	digestErr    string
	digestDue    bool
	digestLent   bool
	// coming (GEN, backends without completion events): the sender said
	// the bytes are on their way; only then does waiting drive progress.
	coming bool
}

type session struct {
	req   Request
	state State
	// failed: the transfer failed on this rank or a peer said it did
	// (why says how); it ends failed once no write is in flight.
	failed bool
	why    string
	// relayed: why is a peer's report, which a failure this rank finds
	// itself replaces.
	relayed bool
	frags   []fragState
	// lease pins the request's blocks on this rank while bytes may move
	// into or out of them (none when the request has no block here: under
	// CP a short request may have none). The executor owns the blocks.
	lease    kvpool.LeaseID
	leased   bool
	blocks   []kvpool.BlockID
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
	// cancelRelayed: the cancel came from a peer (its message, or a
	// cancel that reached this rank before its session started), so
	// cancelReason names the peer, not the cause this rank saw.
	cancelRelayed bool
	refused       bool // a cancel was refused while a write was in flight
	notStarted    bool // CTX: the transfer could not start (Faults.FailSend)
}

// fail marks the session failed, keeping the first reason.
func (s *session) fail(why string) {
	if !s.failed || s.relayed {
		s.failed, s.why, s.relayed = true, why, false
	}
}

// failRelayed records a failure a peer reported: the reason this rank
// gives unless it finds one of its own (a byte that fails its check names
// where, which "peer ... reported" does not), whichever comes first.
func (s *session) failRelayed(why string) {
	if !s.failed {
		s.failed, s.why, s.relayed = true, why, true
	}
}

// whyRelayed reports whether the reason s ended with is a peer's news
// rather than what this rank found itself.
func (s *session) whyRelayed() bool {
	if s.failed {
		return s.relayed
	}
	return s.cancelRelayed
}

// sentWhole reports whether s is a send every fragment of which left:
// whatever this rank then saw (an ack past the transfer timeout), the
// receivers hold every byte, so how the transfer ended is theirs to find,
// not this rank's.
func (t *Transceiver) sentWhole(s *session) bool {
	if t.cfg.Role != topology.Context || len(s.frags) == 0 {
		return false
	}
	for i := range s.frags {
		if !s.frags[i].posted {
			return false
		}
	}
	return true
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

func (t *Transceiver) addSession(s *session) {
	t.sessions[s.req.ID] = s
	t.order = append(t.order, s)
	t.live = append(t.live, s)
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
	t.held.Keep(func(w int64) bool { return t.sessions[request.ID(consensus.WordID(w))] != nil })
}

// vote is the local outcome a terminal session reports in the status
// check.
func (s *session) vote() consensus.State {
	switch s.state {
	case StateCancelled:
		return consensus.Cancelled
	case StateFailed:
		return consensus.Failed
	}
	return consensus.Completed
}

// hold adds a session that just became terminal to the held words (its
// contribution to the next status checks), keeping them ascending by id.
func (t *Transceiver) hold(s *session) {
	id := uint64(s.req.ID)
	quiesced := !s.inFlight()
	if !quiesced {
		t.unquiesced++
	}
	t.held.Put(consensus.Word(id, s.vote(), quiesced))
}

func (t *Transceiver) setTerminal(s *session, st State, reason string) {
	if s.state.terminal() {
		return
	}
	s.state = st
	if s.why == "" {
		s.why = reason
	}
	s.terminal = t.clk.Now()
	t.terminal++
	t.hold(s)
	if st != StateTransferred {
		t.stats.LocalFailures++
	}
	if st != StateTransferred {
		t.cfg.Log.Debug("transfer ended", zap.Uint64("request", uint64(s.req.ID)), zap.Stringer("state", st), zap.String("reason", reason))
	}
}

// leaseBlocks pins the blocks the caller allocated for s's request: exactly
// BlocksFor(Tokens) of them must be held in the pool (none under CP when
// the request is short: then there is nothing to pin).
func (t *Transceiver) leaseBlocks(s *session) error {
	id := s.req.ID
	blocks := t.cfg.Pool.Blocks(id)
	if want := t.shard.BlocksFor(s.req.Tokens); len(blocks) != want {
		return fmt.Errorf("%w: request %d holds %d blocks on %s rank %d, its %d tokens need %d (the caller allocates them)",
			ErrUnknown, id, len(blocks), t.cfg.Role, t.cfg.Rank, s.req.Tokens, want)
	}
	if len(blocks) == 0 {
		return nil
	}
	lease, err := t.cfg.Pool.Lease(id)
	if err != nil {
		return fmt.Errorf("transceiver: lease request %d: %w", id, err)
	}
	s.lease, s.leased, s.blocks = lease, true, blocks
	return nil
}

// endLease unpins s's blocks; the caller may release them afterwards.
func (t *Transceiver) endLease(s *session) error {
	if !s.leased {
		return nil
	}
	s.leased = false
	if err := t.cfg.Pool.EndLease(s.lease); err != nil {
		return fmt.Errorf("transceiver: end lease of request %d: %w", s.req.ID, err)
	}
	return nil
}

// canStart checks that op may open a session for id on this rank: the right
// role, not closed, no session for id yet.
func (t *Transceiver) canStart(role topology.Role, op string, id request.ID) error {
	if t.cfg.Role != role {
		return fmt.Errorf("%w: %s on a %s rank", ErrConfig, op, t.cfg.Role)
	}
	if t.closed {
		return ErrClosed
	}
	if _, ok := t.sessions[id]; ok {
		return fmt.Errorf("%w: %s: request %d already has a session on this %s rank", ErrDuplicate, op, id, t.cfg.Role)
	}
	if uint64(id) > consensus.MaxID {
		return fmt.Errorf("%w: %s: request id %d above %d, the largest a status check carries", ErrConfig, op, id, uint64(consensus.MaxID))
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

// cancelStatus is the status a Cancel or CancelAck carries: CodeFailed
// when the session failed (so that every rank records a failure, not a
// cancel, and the group's outcome is the same whatever the timing),
// CodeCancelled otherwise.
func (s *session) cancelStatus() wire.StatusCode {
	if s.failed {
		return wire.CodeFailed
	}
	return wire.CodeCancelled
}

// peerFailed records that peer (a world rank) reported the transfer failed.
func (t *Transceiver) peerFailed(s *session, peer int) {
	s.failRelayed(fmt.Sprintf("peer world rank %d reported the transfer failed", peer))
}

// noteFinished remembers a reaped request so that late control messages
// for it are recognised (bounded).
func (t *Transceiver) noteFinished(id request.ID) {
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

// SessionInfo is one held session as a failure dump shows it.
type SessionInfo struct {
	ID            request.ID
	Role          topology.Role // Context: this rank sends; Generation: it receives
	Peers         []int         // world ranks of the other side, one per fragment
	State         string        // the session's state, and why it failed or is cancelling
	BytesDone     int64         // payload bytes sent (CTX) or received (GEN) so far
	BytesExpected int64
	Started       time.Time
	Terminal      time.Time // when it ended on this rank (zero while in flight)
	Lease         string    // "lease N" while the blocks are pinned, "" otherwise
}

// Snapshot lists the sessions held, in creation order: what a failure dump
// shows of this rank's transfers. Call it from the goroutine that owns the
// transceiver.
func (t *Transceiver) Snapshot() []SessionInfo {
	out := make([]SessionInfo, 0, len(t.sessions))
	for _, s := range t.order {
		if s.dropped {
			continue
		}
		si := SessionInfo{ID: s.req.ID, Role: t.cfg.Role, State: s.state.String(), Started: s.started, Terminal: s.terminal}
		switch {
		case s.failed:
			si.State += " (failed: " + s.why + ")"
		case s.cancelling:
			si.State += " (cancelling: " + s.cancelReason + ")"
		}
		for i := range s.frags {
			fs := &s.frags[i]
			if !slices.Contains(si.Peers, fs.peer) {
				si.Peers = append(si.Peers, fs.peer)
			}
			si.BytesExpected += int64(fs.payload)
			if fs.done {
				si.BytesDone += int64(fs.payload)
			}
		}
		if s.leased {
			si.Lease = fmt.Sprintf("lease %d on %d blocks", s.lease, len(s.blocks))
		}
		out = append(out, si)
	}
	return out
}

// postedFrags counts the fragments of s this rank has posted.
func (s *session) postedFrags() int {
	n := 0
	for i := range s.frags {
		if s.frags[i].posted {
			n++
		}
	}
	return n
}
