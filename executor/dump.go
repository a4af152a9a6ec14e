package executor

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/diag"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/transceiver"
)

// maxStackBytes bounds the goroutine stacks a dump keeps.
const maxStackBytes = 1 << 20

// writeDump writes this rank's failure dump into cfg.DumpDir (DESIGN.md
// §12): what it knew when err ended its loop, taken before the loop's
// cleanup closes its sessions. It returns the file's path.
func (l *loop) writeDump(err error) (string, error) {
	return diag.Write(l.cfg.DumpDir, l.dump(err))
}

// dump is this rank's state as the failure dump shows it.
func (l *loop) dump(err error) *diag.Dump {
	d := &diag.Dump{Job: l.cfg.DumpJob, WorldRank: l.world.Rank(), WorldSize: l.world.Size(), PID: os.Getpid(), Backend: l.cfg.DumpBackend}
	d.Host, _ = os.Hostname()
	if err != nil {
		d.Error, d.ErrorKind = err.Error(), ErrorKind(err)
	}
	if errors.Is(err, ErrInterrupted) {
		d.ErrorKind = "signal"
	}
	// Its own timeout only: in one process a rank cancelled by another's
	// failure carries that rank's error.
	var te *comm.TimeoutError
	if errors.As(err, &te) && timedOutHere(te, l.world.Rank()) {
		t := &diag.Timeout{Group: te.Group, Seq: te.Waiting.Seq, Kind: te.Waiting.Kind.String(), Site: te.Waiting.Site, Missing: []int{}}
		for _, m := range te.Missing {
			t.Missing = append(t.Missing, worldRank(te.WorldRanks, m))
		}
		d.Timeout = t
	}
	for _, c := range l.comms() {
		n, _ := comm.Entered(c)
		d.Groups = append(d.Groups, diag.Group{Name: c.Name(), Ranks: membersOf(c, l.world.Size()), Entered: n})
	}
	d.Unrecorded = l.rec == nil
	for _, r := range l.rec.Snapshot() {
		op := diag.Op{Group: r.Group, Seq: r.Seq, Kind: r.Kind.String(), Site: r.Site, Path: r.Path, Peer: r.Peer, Tag: r.Tag,
			StartNS: r.Start.UnixNano(), Err: r.Err, Guards: guardsOf(r.Guards)}
		if !r.InProgress() {
			op.EndNS = r.End.UnixNano()
		}
		d.Ops = append(d.Ops, op)
	}
	l.rec.Publish()
	d.Pending = guardsOf(l.rec.Pending())
	now := l.clk.Now()
	sessions := l.tr.Snapshot()
	d.Requests = l.requestTimes(sessions)
	for _, s := range sessions {
		role := "send"
		if !l.isCtx() {
			role = "recv"
		}
		d.Sessions = append(d.Sessions, diag.Session{Request: int64(s.ID), Role: role, Peers: s.Peers, State: s.State,
			BytesDone: s.BytesDone, BytesExpected: s.BytesExpected, AgeNS: now.Sub(s.Started).Nanoseconds(), Lease: s.Lease})
	}
	st := l.pool.Stats()
	p := diag.Pool{Name: l.pool.Name(), Total: st.Total, Free: st.Free, Used: st.Used, Pinned: st.Pinned}
	for _, h := range l.pool.Holdings() {
		if h.Leases > 0 {
			p.PinnedBy = append(p.PinnedBy, diag.PinnedBy{Request: int64(h.Request), Blocks: h.Blocks})
		}
	}
	d.Pools = []diag.Pool{p}
	for _, x := range l.log1.last() {
		d.Iterations = append(d.Iterations, diag.Iteration{N: int64(x.iter), AtNS: x.at, Decision: x.what + ": " + x.row, Why: x.inputs()})
	}
	if l.cfg.DumpStacks || l.world.Rank() == 0 {
		// In one process every rank's goroutines are the same process's:
		// world rank 0 keeps them, unless each rank is a process of its own.
		buf := make([]byte, maxStackBytes)
		d.Stacks = string(buf[:runtime.Stack(buf, true)])
	}
	return d
}

// comms are the rank's communicators, each once.
func (l *loop) comms() []comm.Comm {
	var out []comm.Comm
	seen := map[string]bool{}
	for _, c := range append([]comm.Comm{l.world, l.g.inst, l.g.exec}, l.g.scope...) {
		if c != nil && !seen[c.Name()] {
			seen[c.Name()] = true
			out = append(out, c)
		}
	}
	return out
}

// membersOf is c's members as world ranks (the identity for the world).
func membersOf(c comm.Comm, worldSize int) []int {
	if w := comm.PropsOf(c).WorldRanks; w != nil {
		return w
	}
	out := make([]int, c.Size())
	for i := range out {
		out[i] = i
	}
	if c.Size() != worldSize {
		return nil // a group whose members the backend does not say
	}
	return out
}

func guardsOf(gs []flight.GuardValue) []diag.Guard {
	out := make([]diag.Guard, 0, len(gs))
	for _, g := range gs {
		out = append(out, diag.Guard{Name: g.Name, Value: g.Text(), Site: g.Site})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// maxDumpWaiting bounds the waiting requests a dump lists.
const maxDumpWaiting = 64

// requestTimes is what this rank saw of each request it still has: the
// records of those taken in (waiting, or admitted on GEN), and its
// sessions' start and end.
func (l *loop) requestTimes(sessions []transceiver.SessionInfo) []diag.RequestTimes {
	var out []diag.RequestTimes
	at := map[request.ID]int{}
	// A record's times are 0 until set (0 is also the run's start: an
	// arrival then is kept); a session's and the dump's own are real.
	add := func(id request.ID, what string, ns int64, set bool) {
		if !set && ns <= 0 {
			return
		}
		i, ok := at[id]
		if !ok {
			i = len(out)
			at[id] = i
			out = append(out, diag.RequestTimes{Request: int64(id)})
		}
		out[i].Events = append(out[i].Events, diag.Event{What: what, AtNS: ns})
	}
	record := func(r RequestRecord, where string) {
		add(r.ID, "arrived", r.Arrival, true)
		add(r.ID, "prefill started", r.PrefillStart, false)
		add(r.ID, "prefill ended", r.PrefillEnd, false)
		add(r.ID, "admitted on GEN", r.GenAdmit, false)
		add(r.ID, "transfer agreed", r.TransferDone, false)
		add(r.ID, "first token", r.FirstToken, false)
		if where != "" {
			add(r.ID, where, l.now(), true)
		}
	}
	for i, r := range l.waiting {
		if i == maxDumpWaiting {
			break
		}
		record(RequestRecord{ID: r.ID, Arrival: r.Arrival, PrefillStart: r.PrefillStart, PrefillEnd: r.PrefillEnd}, "waiting for admission (at the dump)")
	}
	for _, u := range l.unfinished {
		record(RequestRecord{ID: u.r.ID, Arrival: u.r.Arrival, PrefillStart: u.r.PrefillStart},
			fmt.Sprintf("prefilled %d of %d prompt tokens, chunks left (at the dump)", u.done, u.r.Tokens))
	}
	if l.liveRecords != nil {
		for _, r := range l.liveRecords() {
			record(r, "")
		}
	}
	for _, s := range sessions {
		role := "sending"
		if !l.isCtx() {
			role = "receiving"
		}
		add(s.ID, fmt.Sprintf("%s session opened (peers %v)", role, s.Peers), s.Started.Sub(l.t0).Nanoseconds(), true)
		if !s.Terminal.IsZero() {
			add(s.ID, "session "+s.State+" here", s.Terminal.Sub(l.t0).Nanoseconds(), true)
		}
	}
	for i := range out {
		slices.SortStableFunc(out[i].Events, func(a, b diag.Event) int { return cmp.Compare(a.AtNS, b.AtNS) })
	}
	return out
}

// worldRank is group rank r's world rank through worlds (a group's
// comm.PropsOf(c).WorldRanks), or r where worlds does not cover it.
func worldRank(worlds []int, r int) int {
	if r >= 0 && r < len(worlds) {
		return worlds[r]
	}
	return r
}

// timedOutHere reports whether te is world rank w's own timeout.
func timedOutHere(te *comm.TimeoutError, w int) bool {
	self, missing := te.Self, te.Missing
	if te.WorldRanks != nil {
		if self < 0 || self >= len(te.WorldRanks) {
			return false
		}
		self, missing = te.WorldRanks[self], make([]int, len(te.Missing))
		for i, m := range te.Missing {
			missing[i] = worldRank(te.WorldRanks, m)
		}
	} else if te.Group != "world" {
		return false
	}
	// A rank that reached a group a peer's timeout had broken inherits
	// that timeout's missing ranks, itself among them: not its own wait.
	return self == w && !slices.Contains(missing, w)
}
