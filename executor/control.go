package executor

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/topology"
)

// ctlChan is a rank's control channel: the request records that travel
// between the router and the group leaders (route, handoff, done) on the
// executor's own communicator, and every send of the loop not yet known
// to be received.
type ctlChan struct {
	ctlReq comm.Request // leaders: the posted receive for the next record
	ctlBuf []byte
	inbox  []rec // leaders: records received, for the next intake
	outbox []comm.Request
}

// ctxLeaderWorld is the world rank of the CTX executor-group leader for a
// request of CTX DP index dc.
func (l *loop) ctxLeaderWorld(dc int) int {
	if l.cfg.Ctx.AttentionDP {
		return 0
	}
	return dc * l.cfg.Ctx.ReplicaRanks()
}

// genLeaderWorld is the world rank of the GEN executor-group leader for a
// request of GEN DP index dg.
func (l *loop) genLeaderWorld(dg int) int {
	base := topology.WorldRank(l.cfg.Ctx, topology.Generation, 0)
	if l.cfg.Gen.AttentionDP {
		return base
	}
	return base + dg*l.cfg.Gen.ReplicaRanks()
}

func (l *loop) postCtl() error {
	if !l.leader {
		return nil
	}
	q, err := l.ctl.Irecv(l.ctlBuf, comm.AnySource, tagMsg)
	if err != nil {
		return fmt.Errorf("executor: post message receive: %w", err)
	}
	l.ctlReq = q
	return nil
}

func (l *loop) send(dest int, r rec) error {
	q, err := l.ctl.Isend(r.put(nil), dest, tagMsg)
	if err != nil {
		return fmt.Errorf("executor: send %v of request %d to world rank %d: %w", r.Kind, r.ID, dest, err)
	}
	l.outbox = append(l.outbox, q)
	return nil
}

// route hands a released request to its CTX group leader (this rank's own
// inbox when it is that leader).
func (l *loop) route(r rec) error {
	if dest := l.ctxLeaderWorld(int(r.CtxDP)); dest != l.world.Rank() {
		return l.send(dest, r)
	}
	l.inbox = append(l.inbox, r)
	return nil
}

// pumpCtl receives routed, handed-off and done records (leaders only).
func (l *loop) pumpCtl() error {
	for l.ctlReq != nil {
		st, done, err := l.ctlReq.Test()
		if !done {
			break
		}
		if err != nil {
			return fmt.Errorf("executor: message receive: %w", err)
		}
		r, err := getRec(l.ctlBuf[:st.Len])
		if err != nil {
			return fmt.Errorf("executor: from world rank %d: %w", st.Source, err)
		}
		switch r.Kind {
		case msgRoute, msgHandoff:
			l.inbox = append(l.inbox, r)
		case msgDone:
			if l.router == nil {
				return fmt.Errorf("executor: done message for request %d reached world rank %d, which is not the router", r.ID, l.world.Rank())
			}
			l.router.finished(r.ID, r.Arrival)
			if l.router.done%100 == 0 {
				// Progress, for whoever watches the log (the CLI's signal tests).
				l.log.Debug("requests finished", zap.Int("finished", l.router.done), zap.Int("of", len(l.router.reqs)))
			}
		}
		if err := l.postCtl(); err != nil {
			return err
		}
	}
	return l.pruneOutbox()
}

// pruneOutbox forgets the sends that completed (every rank, every
// iteration: members send wakes, leaders messages and ticks).
func (l *loop) pruneOutbox() error {
	keep := l.outbox[:0]
	for _, q := range l.outbox {
		if _, done, err := q.Test(); !done {
			keep = append(keep, q)
		} else if err != nil {
			return fmt.Errorf("executor: message send: %w", err)
		}
	}
	clear(l.outbox[len(keep):])
	l.outbox = keep
	return nil
}
