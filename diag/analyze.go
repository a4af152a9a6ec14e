package diag

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Story is what a job's dumps say together (DESIGN.md §12): which ranks
// wrote one and which did not, how far each rank got on each communicator
// (the wavefront), the first collective the ranks entered differently, the
// ranks that never arrived where others wait and what they did instead,
// the guard values that differed, and the requests still in flight.
type Story struct {
	Source    string `json:"source"` // "rankrun" or "pytorch" (of the first dump)
	WorldSize int    `json:"world_size"`
	Dumped    []int  `json:"dumped"`  // world ranks with a dump
	NoDump    []int  `json:"no_dump"` // world ranks in a group with no dump
	// Versions are the format versions the dumps give (PyTorch's
	// "version"), each with the ranks that wrote it, when they disagree:
	// ranks that ran different builds. Nil when every dump gives the same.
	Versions []VersionRanks `json:"versions,omitempty"`
	Errors   []RankError    `json:"errors,omitempty"`
	Groups   []Front        `json:"groups"`
	// Mismatch is the first collective (lowest sequence number, on any
	// group) where the ranks' entries differ; nil when none does.
	Mismatch *Mismatch `json:"mismatch,omitempty"`
	// Waits are the collectives where some ranks wait and others never
	// arrived.
	Waits    []Wait         `json:"waits,omitempty"`
	Requests []RequestStory `json:"requests,omitempty"`
	// Unrecorded are the dumped world ranks that kept no flight recorder
	// (they ran unchecked): the story can say nothing of their
	// collectives.
	Unrecorded []int `json:"unrecorded,omitempty"`
	// Unreadable are the directory's files that are not dumps (set by the
	// caller from ReadDirSkipping): their ranks count as having none.
	Unreadable []Unreadable `json:"unreadable,omitempty"`
}

// Found reports whether the story names a hang (ranks that wait where
// others never arrived) or a mismatch (a collective the ranks entered
// differently, or dumps whose format versions disagree): what rankrun
// analyze's exit status 1 says.
func (s *Story) Found() bool {
	return s.Mismatch != nil || len(s.Waits) > 0 || len(s.Versions) > 0
}

// VersionRanks is one dump format version and the world ranks whose dumps
// give it ("" for none).
type VersionRanks struct {
	Version string `json:"version"`
	Ranks   []int  `json:"ranks"`
}

// RankError is the failure one rank saw.
type RankError struct {
	Rank  int    `json:"rank"`
	Kind  string `json:"kind"`
	First string `json:"first_line"`
}

// Front is one communicator's wavefront: each member's last collective.
type Front struct {
	Group   string     `json:"group"`
	Ranks   []int      `json:"ranks"` // world ranks, in group-rank order
	Members []Position `json:"members"`
}

// Position is where one rank is on a group.
type Position struct {
	Rank int `json:"rank"`
	// Seq is its last collective's number; for a rank with no dump the
	// highest number its peers completed (which it must have entered).
	Seq      uint64 `json:"seq"`
	Kind     string `json:"kind,omitempty"`
	Site     string `json:"site,omitempty"`
	Done     bool   `json:"done"`
	Failed   bool   `json:"failed,omitempty"`   // it ended in an error
	Inferred bool   `json:"inferred,omitempty"` // no dump: from its peers
	// Unrecorded: its dump has no flight recorder (it ran unchecked).
	Unrecorded bool    `json:"unrecorded,omitempty"`
	Guards     []Guard `json:"guards,omitempty"`
}

// Mismatch is one collective entered differently.
type Mismatch struct {
	Group string `json:"group"`
	Seq   uint64 `json:"seq"`
	Sides []Side `json:"sides"`
	// Parted names where the first two sides' call paths part ("a vs
	// b"), when the dumps have whole paths.
	Parted string `json:"parted,omitempty"`
}

// Side is the ranks that entered a mismatched collective alike.
type Side struct {
	Ranks  []int   `json:"ranks"`
	Kind   string  `json:"kind"`
	Shape  string  `json:"shape,omitempty"`
	Site   string  `json:"site,omitempty"`
	Path   string  `json:"path,omitempty"`
	Guards []Guard `json:"guards,omitempty"`
}

// Wait is a collective some ranks wait in while others never arrived.
type Wait struct {
	Group   string    `json:"group"`
	Seq     uint64    `json:"seq"`
	Kind    string    `json:"kind"`
	Site    string    `json:"site,omitempty"`
	Waiting []int     `json:"waiting"`
	Absent  []Absence `json:"absent"`
}

// Absence is a rank that never arrived at a Wait, and what it did instead.
type Absence struct {
	Rank   int  `json:"rank"`
	NoDump bool `json:"no_dump"`
	// Last is its last collective on the group (inferred for a rank with
	// no dump: the highest its peers completed).
	Last uint64 `json:"last_seq"`
	// Doing is its last operation anywhere, when it had not ended (a
	// point-to-point wait, another group's collective).
	Doing string `json:"doing,omitempty"`
	// Pending are the guard values it recorded since its last collective.
	Pending []Guard `json:"pending_guards,omitempty"`
	// Holds are the requests in flight with it: its own sessions and the
	// others' that name it as their peer.
	Holds []int64 `json:"holds,omitempty"`
	// Later: its own dump shows it in or past the collective, taken after
	// its peers gave up (mpirun wakes a stopped rank to end it): its
	// position is its peers' view.
	Later bool `json:"dumped_later,omitempty"`
}

// RequestStory is one request still in flight: every rank's session.
type RequestStory struct {
	Request  int64         `json:"request"`
	Sessions []RankSession `json:"sessions"`
	// Timeline is every rank's events for it, in time (each rank's
	// clock; under mpirun the ranks' clocks start a little apart).
	Timeline []RankEvent `json:"timeline,omitempty"`
	// Absent are ranks that are a session's peer but wrote no dump.
	Absent []int `json:"absent,omitempty"`
}

// RankEvent is one rank's event of a request.
type RankEvent struct {
	Rank int `json:"rank"`
	Event
}

// RankSession is one rank's session of a request.
type RankSession struct {
	Rank int `json:"rank"`
	Session
}

// ReadDir reads every dump in dir: rankrun's rank-*.json and any other
// file that parses as a dump (PyTorch's nccl_trace_rank_N). A file that is
// neither is an error naming it.
func ReadDir(dir string) ([]*Dump, error) {
	out, bad, err := ReadDirSkipping(dir)
	if err == nil && len(bad) > 0 {
		return nil, bad[0].err
	}
	return out, err
}

// Unreadable is a file of a dump directory that is not a dump: one a rank
// killed while writing it left truncated, a stray file.
type Unreadable struct {
	File string `json:"file"`
	Why  string `json:"why"`
	err  error
}

// ReadDirSkipping is ReadDir reading past the files that are not dumps:
// it returns them apart, so that the job's story is told from the dumps
// that are there. Only a directory with no dump at all, dumps of two jobs
// or two dumps of one rank are errors. Subdirectories, names beginning
// with "." or ending in ".tmp", and what is not a file (a named pipe, such
// as the nccl_trace_rank_N.pipe PyTorch makes beside its dumps, a socket,
// a device) are passed over unread and unlisted; a link is followed, and
// what it leads to that is not a file is listed as not a dump.
func ReadDirSkipping(dir string) ([]*Dump, []Unreadable, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("diag: %w", err)
	}
	var out []*Dump
	var bad []Unreadable
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".tmp") {
			continue
		}
		if t := e.Type(); t&os.ModeType != 0 && t&os.ModeSymlink == 0 {
			continue // a FIFO would block the read forever
		}
		path := filepath.Join(dir, name)
		d, err := ReadFile(path)
		if err != nil {
			why := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "diag: "), path+": ")
			bad = append(bad, Unreadable{File: path, Why: why, err: err})
			continue
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		if len(bad) > 0 {
			return nil, bad, fmt.Errorf("diag: %s holds no readable dump (%s: %s)", dir, bad[0].File, bad[0].Why)
		}
		return nil, nil, fmt.Errorf("diag: %s holds no dump (rankrun's rank-NNNNN.json, or PyTorch's flight-recorder files)", dir)
	}
	for _, d := range out[1:] {
		if d.Job != out[0].Job {
			return nil, bad, fmt.Errorf("diag: %s holds dumps of more than one job (%q in %s, %q in %s): keep one job's dumps per directory", dir, out[0].Job, out[0].File, d.Job, d.File)
		}
	}
	seen := map[int]string{}
	for _, d := range out {
		if f, dup := seen[d.WorldRank]; dup {
			return nil, bad, fmt.Errorf("diag: %s and %s are both world rank %d's dump", f, d.File, d.WorldRank)
		}
		seen[d.WorldRank] = d.File
	}
	slices.SortFunc(out, func(a, b *Dump) int { return cmp.Compare(a.WorldRank, b.WorldRank) })
	return out, bad, nil
}

// Analyze tells the story of a job's dumps. It is a pure function of them.
func Analyze(dumps []*Dump) *Story {
	s := &Story{Dumped: []int{}, NoDump: []int{}, Groups: []Front{}}
	by := map[int]*Dump{}
	for _, d := range dumps {
		by[d.WorldRank] = d
		s.Dumped = append(s.Dumped, d.WorldRank)
		s.WorldSize = max(s.WorldSize, d.WorldSize)
		if s.Source == "" {
			s.Source = d.Source
		}
		if d.Unrecorded {
			s.Unrecorded = append(s.Unrecorded, d.WorldRank)
		}
		if d.Error != "" {
			first, _, _ := strings.Cut(d.Error, "\n")
			s.Errors = append(s.Errors, RankError{Rank: d.WorldRank, Kind: d.ErrorKind, First: first})
		}
	}
	slices.Sort(s.Dumped)
	slices.Sort(s.Unrecorded)
	s.Versions = versions(dumps)
	groups := groupsOf(dumps)
	absent := map[int]bool{}
	for _, g := range groups {
		for _, r := range g.Ranks {
			if by[r] == nil {
				absent[r] = true
			}
		}
	}
	for r := range s.WorldSize {
		if by[r] == nil {
			absent[r] = true
		}
	}
	for r := range absent {
		s.NoDump = append(s.NoDump, r)
	}
	slices.Sort(s.NoDump)
	timedOut := timeoutWaits(dumps, groups, by)
	for _, g := range groups {
		s.Groups = append(s.Groups, front(g, by))
		if m := mismatch(g, by); m != nil && (s.Mismatch == nil || m.Seq < s.Mismatch.Seq) {
			s.Mismatch = m
		}
		if !slices.ContainsFunc(timedOut, func(w Wait) bool { return w.Group == g.Name }) {
			s.Waits = append(s.Waits, waits(g, by)...) // no timeout names this group: read its flight records
		}
	}
	s.Waits = append(s.Waits, timedOut...)
	s.Requests = requests(dumps, absent)
	for i := range s.Waits {
		for j := range s.Waits[i].Absent {
			a := &s.Waits[i].Absent[j]
			a.Holds = holds(s.Requests, a.Rank)
		}
	}
	return s
}

// versions are the dumps' format versions with their ranks, in the order
// of each version's lowest rank; nil when there are fewer than two.
func versions(dumps []*Dump) []VersionRanks {
	var out []VersionRanks
	for _, d := range dumps {
		i := slices.IndexFunc(out, func(v VersionRanks) bool { return v.Version == d.Version })
		if i < 0 {
			i = len(out)
			out = append(out, VersionRanks{Version: d.Version})
		}
		out[i].Ranks = append(out[i].Ranks, d.WorldRank)
	}
	if len(out) < 2 {
		return nil
	}
	for i := range out {
		slices.Sort(out[i].Ranks)
	}
	slices.SortFunc(out, func(a, b VersionRanks) int { return cmp.Compare(a.Ranks[0], b.Ranks[0]) })
	return out
}

// groupsOf is every group any dump names, once, by name.
func groupsOf(dumps []*Dump) []Group {
	m := map[string]Group{}
	for _, d := range dumps {
		for _, g := range d.Groups {
			if _, ok := m[g.Name]; !ok && len(g.Ranks) > 0 {
				m[g.Name] = g
			}
		}
	}
	out := make([]Group, 0, len(m))
	for _, g := range m {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Group) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// entered is how many collectives d's rank entered on group, by its count.
func entered(d *Dump, group string) uint64 {
	for _, g := range d.Groups {
		if g.Name == group {
			return g.Entered
		}
	}
	return 0
}

// collectives are d's collective ops on group, oldest first.
func collectives(d *Dump, group string) []Op {
	var out []Op
	for _, o := range d.Ops {
		if o.Group == group && !o.P2P() && o.Seq > 0 {
			out = append(out, o)
		}
	}
	return out
}

// completedBy is the highest sequence number any dumped member completed
// on g: every member entered it (a collective completes only once all
// have arrived). A member that entered n collectives there (its dump's
// count) completed n-1 of them, even when its flight recorder has let
// them go.
func completedBy(g Group, by map[int]*Dump) uint64 {
	var hi uint64
	for _, r := range g.Ranks {
		d := by[r]
		if d == nil {
			continue
		}
		for _, o := range collectives(d, g.Name) {
			if !o.InProgress() && o.Err == "" {
				hi = max(hi, o.Seq)
			}
		}
		for _, dg := range d.Groups {
			if dg.Name == g.Name && dg.Entered > 0 {
				hi = max(hi, dg.Entered-1)
			}
		}
	}
	return hi
}

func front(g Group, by map[int]*Dump) Front {
	f := Front{Group: g.Name, Ranks: g.Ranks}
	done := completedBy(g, by)
	for _, r := range g.Ranks {
		d := by[r]
		if d == nil {
			f.Members = append(f.Members, Position{Rank: r, Seq: done, Done: true, Inferred: true})
			continue
		}
		if d.Unrecorded {
			f.Members = append(f.Members, Position{Rank: r, Unrecorded: true})
			continue
		}
		ops := collectives(d, g.Name)
		if len(ops) == 0 {
			// Its recorder let them go: its count says how far it got.
			n := entered(d, g.Name)
			f.Members = append(f.Members, Position{Rank: r, Seq: n, Done: n > 0})
			continue
		}
		o := ops[len(ops)-1]
		f.Members = append(f.Members, Position{Rank: r, Seq: o.Seq, Kind: o.Kind, Site: o.Site, Done: !o.InProgress(), Failed: o.Err != "", Guards: o.Guards})
	}
	return f
}

// mismatch is g's first collective that dumped members entered
// differently: another kind or shape, or (rankrun's stamps name it) another
// call path.
func mismatch(g Group, by map[int]*Dump) *Mismatch {
	type key struct{ kind, shape, path string }
	bySeq := map[uint64]map[key][]int{}
	guards := map[uint64]map[key][][]Guard{}
	sites := map[key]string{}
	for _, r := range g.Ranks {
		d := by[r]
		if d == nil {
			continue
		}
		for _, o := range collectives(d, g.Name) {
			k := key{o.Kind, o.Shape, ""}
			if d.Source == "rankrun" {
				k.path = cmp.Or(o.Path, o.Site)
			}
			sites[k] = o.Site
			if bySeq[o.Seq] == nil {
				bySeq[o.Seq], guards[o.Seq] = map[key][]int{}, map[key][][]Guard{}
			}
			bySeq[o.Seq][k] = append(bySeq[o.Seq][k], r)
			guards[o.Seq][k] = append(guards[o.Seq][k], o.Guards)
		}
	}
	seqs := make([]uint64, 0, len(bySeq))
	for q := range bySeq {
		seqs = append(seqs, q)
	}
	slices.Sort(seqs)
	for _, q := range seqs {
		if len(bySeq[q]) < 2 {
			continue
		}
		m := &Mismatch{Group: g.Name, Seq: q}
		for k, ranks := range bySeq[q] {
			m.Sides = append(m.Sides, Side{Ranks: ranks, Kind: k.kind, Shape: k.shape, Site: sites[k], Path: k.path, Guards: mergeGuards(guards[q][k])})
		}
		slices.SortFunc(m.Sides, func(a, b Side) int { return cmp.Compare(a.Ranks[0], b.Ranks[0]) })
		m.Parted = parted(m.Sides[0].Path, m.Sides[1].Path)
		return m
	}
	return nil
}

// timeoutWaits are the waits the ranks' own collective timeouts name:
// where each timed-out rank waited and the ranks its stall inspector found
// had never arrived, as the ranks knew it when they failed. Nil when no
// dump carries a timeout (then the waits are read off the flight records).
func timeoutWaits(dumps []*Dump, groups []Group, by map[int]*Dump) []Wait {
	var out []Wait
	at := map[string]int{}
	for _, d := range dumps {
		t := d.Timeout
		if t == nil {
			continue
		}
		key := fmt.Sprintf("%s#%d", t.Group, t.Seq)
		i, ok := at[key]
		if !ok {
			i = len(out)
			at[key] = i
			out = append(out, Wait{Group: t.Group, Seq: t.Seq, Kind: t.Kind, Site: t.Site})
		}
		w := &out[i]
		w.Waiting = append(w.Waiting, d.WorldRank)
		var g Group
		for _, x := range groups {
			if x.Name == t.Group {
				g = x
			}
		}
		done := completedBy(g, by)
		if t.Seq > 0 {
			done = min(done, t.Seq-1) // it never arrived at t.Seq
		}
		for _, m := range t.Missing {
			if slices.ContainsFunc(w.Absent, func(a Absence) bool { return a.Rank == m }) {
				continue
			}
			a := Absence{Rank: m, NoDump: by[m] == nil, Last: done}
			if md := by[m]; md != nil {
				a.Pending = md.Pending
				last, doing := lastOn(md, t.Group)
				if last < t.Seq || t.Seq == 0 {
					// Its own records agree it never arrived: they say
					// how far it got and what it was in instead.
					a.Last, a.Doing = last, doing
				} else {
					a.Later = true // it went on after its peers gave up
				}
			}
			w.Absent = append(w.Absent, a)
		}
	}
	return out
}

// waits are g's collectives some members wait in (in progress at their
// dump) that others never reached.
func waits(g Group, by map[int]*Dump) []Wait {
	done := completedBy(g, by)
	var out []Wait
	at := map[uint64]*Wait{}
	var order []uint64
	for _, r := range g.Ranks {
		d := by[r]
		if d == nil {
			continue
		}
		ops := collectives(d, g.Name)
		if len(ops) == 0 {
			continue
		}
		o := ops[len(ops)-1]
		if !o.InProgress() && (o.Err == "" || !waitedOut(d)) {
			continue // it left the collective: done, or ended by another rank's failure
		}
		w := at[o.Seq]
		if w == nil {
			w = &Wait{Group: g.Name, Seq: o.Seq, Kind: o.Kind, Site: o.Site}
			at[o.Seq] = w
			order = append(order, o.Seq)
		}
		w.Waiting = append(w.Waiting, r)
	}
	for _, q := range order {
		w := at[q]
		for _, r := range g.Ranks {
			if slices.Contains(w.Waiting, r) {
				continue
			}
			d := by[r]
			if d == nil {
				w.Absent = append(w.Absent, Absence{Rank: r, NoDump: true, Last: done})
				continue
			}
			if d.Unrecorded {
				continue // no flight record: nothing says whether it arrived
			}
			last, doing := lastOn(d, g.Name)
			if last >= q {
				continue // it arrived (and maybe went on: a mismatch tells)
			}
			w.Absent = append(w.Absent, Absence{Rank: r, Last: last, Pending: d.Pending, Doing: doing})
		}
		if len(w.Absent) > 0 {
			out = append(out, *w)
		}
	}
	return out
}

// waitedOut reports whether d's rank's own failure ended a wait (a desync
// or a timeout), so that a collective that ended in an error is where it
// waited, not one a peer's failure cancelled.
func waitedOut(d *Dump) bool {
	switch d.ErrorKind {
	case "desync", "collective-timeout", "timeout", "deadlock", "":
		return true
	}
	return false
}

// lastOn is how far d's rank got on group (its last collective there, or
// its count when its recorder let them go) and, when its last operation
// anywhere had not ended, what that was.
func lastOn(d *Dump, group string) (uint64, string) {
	last := entered(d, group)
	if ops := collectives(d, group); len(ops) > 0 {
		last = ops[len(ops)-1].Seq
	}
	doing := ""
	if n := len(d.Ops); n > 0 && d.Ops[n-1].InProgress() {
		doing = describe(d.Ops[n-1])
	}
	return last, doing
}

// describe renders one op for a reader.
func describe(o Op) string {
	if o.P2P() {
		s := fmt.Sprintf("%s peer %d tag %d on %q", o.Kind, o.Peer, o.Tag, o.Group)
		if o.Site != "" {
			s += " at " + o.Site
		}
		return s
	}
	s := fmt.Sprintf("%s #%d on %q", o.Kind, o.Seq, o.Group)
	if o.Site != "" {
		s += " at " + o.Site
	}
	return s
}

// holds are the requests in flight with rank r: its own sessions, and
// those of other ranks that name it as their peer.
func holds(rqs []RequestStory, r int) []int64 {
	var out []int64
	for _, rq := range rqs {
		with := slices.Contains(rq.Absent, r)
		for _, ss := range rq.Sessions {
			with = with || ss.Rank == r || slices.Contains(ss.Peers, r)
		}
		if with {
			out = append(out, rq.Request)
		}
	}
	return out
}

// requests groups every dumped session by request, and names the peers
// with no dump.
func requests(dumps []*Dump, absent map[int]bool) []RequestStory {
	m := map[int64]*RequestStory{}
	get := func(id int64) *RequestStory {
		rq := m[id]
		if rq == nil {
			rq = &RequestStory{Request: id}
			m[id] = rq
		}
		return rq
	}
	for _, d := range dumps {
		for _, rt := range d.Requests {
			rq := get(rt.Request)
			for _, e := range rt.Events {
				rq.Timeline = append(rq.Timeline, RankEvent{Rank: d.WorldRank, Event: e})
			}
		}
		for _, ss := range d.Sessions {
			rq := get(ss.Request)
			rq.Sessions = append(rq.Sessions, RankSession{Rank: d.WorldRank, Session: ss})
			for _, p := range ss.Peers {
				if absent[p] && !slices.Contains(rq.Absent, p) {
					rq.Absent = append(rq.Absent, p)
				}
			}
		}
	}
	out := make([]RequestStory, 0, len(m))
	for _, rq := range m {
		slices.Sort(rq.Absent)
		slices.SortStableFunc(rq.Timeline, func(a, b RankEvent) int {
			return cmp.Or(cmp.Compare(a.AtNS, b.AtNS), cmp.Compare(a.What, b.What), cmp.Compare(a.Rank, b.Rank))
		})
		out = append(out, *rq)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Request < out[j].Request })
	return out
}

// mergeGuards summarises the guard values of the ranks of one side: a
// value they all recorded alike is kept, one they recorded differently
// shows its range (valueRange), and one only some of them recorded says
// how many (Guard.By of Guard.Of).
func mergeGuards(sets [][]Guard) []Guard {
	var out []Guard
	vals := map[string][]string{}
	by := map[string]int{}
	for _, set := range sets {
		seen := map[string]bool{}
		for _, g := range set {
			if _, ok := vals[g.Name]; !ok {
				out = append(out, g)
			}
			if !seen[g.Name] {
				seen[g.Name] = true
				by[g.Name]++ // once per rank, however often its set names it
			}
			if !slices.Contains(vals[g.Name], g.Value) {
				vals[g.Name] = append(vals[g.Name], g.Value)
			}
		}
	}
	for i := range out {
		if v := vals[out[i].Name]; len(v) > 1 {
			out[i].Value = valueRange(v)
		}
		if n := by[out[i].Name]; n < len(sets) {
			out[i].By, out[i].Of = n, len(sets)
		}
	}
	return out
}

// valueRange renders several ranks' values of one guard as comm's
// MergeGuards does: "0..32" for numbers, the distinct values joined by "|"
// otherwise ("false|true").
func valueRange(v []string) string {
	lo, hi, numeric := int64(0), int64(0), true
	for i, x := range v {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			numeric = false
			break
		}
		if i == 0 || n < lo {
			lo = n
		}
		if i == 0 || n > hi {
			hi = n
		}
	}
	if numeric {
		return fmt.Sprintf("%d..%d", lo, hi)
	}
	slices.Sort(v)
	return strings.Join(v, "|")
}

// parted names where two call paths (innermost first, " < " between
// frames) part: the first frame, from the outermost in, where they differ.
func parted(a, b string) string {
	if a == "" || b == "" || a == b {
		return ""
	}
	fa, fb := strings.Split(a, " < "), strings.Split(b, " < ")
	i, j := len(fa)-1, len(fb)-1
	for i >= 0 && j >= 0 && fa[i] == fb[j] {
		i--
		j--
	}
	at := func(fs []string, k int) string {
		if k < 0 {
			return "(end of path)"
		}
		return fs[k]
	}
	return at(fa, i) + " vs " + at(fb, j)
}
