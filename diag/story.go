package diag

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// WriteText prints the story for a reader: one screen for a small job.
// What the dumps say (call sites, frame and file names, kinds, shapes,
// guard values, errors, file names) is written with its control
// characters escaped (esc): a dump cannot break a line or send the
// terminal an escape sequence.
func (s *Story) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "job: %d dumps (%s)", len(s.Dumped), esc(s.Source))
	if s.WorldSize > 0 {
		fmt.Fprintf(&b, " of a world of %d ranks", s.WorldSize)
	}
	fmt.Fprintf(&b, "; dumps from world ranks %v", s.Dumped)
	if len(s.NoDump) > 0 {
		fmt.Fprintf(&b, "; no dump from world ranks %v", s.NoDump)
	}
	b.WriteString("\n")
	if len(s.Versions) > 0 {
		b.WriteString("the dumps' format versions disagree (ranks that ran different builds):")
		for i, v := range s.Versions {
			if i > 0 {
				b.WriteString(";")
			}
			version := fmt.Sprintf("%q", v.Version)
			if v.Version == "" {
				version = "none"
			}
			fmt.Fprintf(&b, " ranks %v wrote version %s", v.Ranks, version)
		}
		b.WriteString("\n")
	}
	for _, u := range s.Unreadable {
		fmt.Fprintf(&b, "not a dump, skipped: %s: %s\n", esc(u.File), esc(u.Why))
	}
	if len(s.NoDump) > 0 || len(s.Unreadable) > 0 {
		b.WriteString("(the story is told from the readable dumps, and their versions compared among themselves; a missing or unreadable dump is listed, but is not by itself a hang or a mismatch)\n")
	}
	for _, e := range s.Errors {
		fmt.Fprintf(&b, "rank %d failed (%s): %s\n", e.Rank, esc(e.Kind), esc(clip(e.First, 300)))
	}
	if len(s.Unrecorded) > 0 {
		fmt.Fprintf(&b, "\nranks %v kept no flight record: they ran unchecked (--unchecked), so no collective, guard value or mismatch of theirs can be shown; rerun checked (the default) for that\n", s.Unrecorded)
	}
	if m := s.Mismatch; m != nil {
		fmt.Fprintf(&b, "\nfirst mismatch: %q #%d was entered differently:\n", m.Group, m.Seq)
		for _, sd := range m.Sides {
			fmt.Fprintf(&b, "  ranks %v entered %s", sd.Ranks, esc(sd.Kind))
			if sd.Shape != "" {
				fmt.Fprintf(&b, " (%s)", esc(sd.Shape))
			}
			if sd.Site != "" {
				fmt.Fprintf(&b, " at %s", esc(sd.Site))
			}
			if len(sd.Guards) > 0 {
				fmt.Fprintf(&b, ", after %s", guardsText(sd.Guards))
			}
			b.WriteString("\n")
		}
		if m.Parted != "" {
			fmt.Fprintf(&b, "  their call paths part at %s\n", esc(m.Parted))
		}
	}
	for _, wt := range s.Waits {
		fmt.Fprintf(&b, "\nranks %v wait in %q #%d (%s", wt.Waiting, wt.Group, wt.Seq, esc(wt.Kind))
		if wt.Site != "" {
			fmt.Fprintf(&b, " at %s", esc(wt.Site))
		}
		b.WriteString("); never arrived:\n")
		for _, a := range wt.Absent {
			if a.NoDump {
				fmt.Fprintf(&b, "  rank %d (no dump: frozen, killed, or it could not write): its last collective there is #%d (its peers completed it)", a.Rank, a.Last)
			} else if a.Later {
				fmt.Fprintf(&b, "  rank %d: its last collective there is #%d as its peers saw it (its own dump, taken later, shows it went on: for example a stopped rank that mpirun woke to end the job)", a.Rank, a.Last)
			} else {
				fmt.Fprintf(&b, "  rank %d: its last collective there is #%d", a.Rank, a.Last)
				if a.Doing != "" {
					fmt.Fprintf(&b, "; it is in %s", esc(a.Doing))
				}
				if len(a.Pending) > 0 {
					fmt.Fprintf(&b, "; since then it recorded %s", guardsText(a.Pending))
				}
			}
			if len(a.Holds) > 0 {
				fmt.Fprintf(&b, "; %d requests in flight with it: %s", len(a.Holds), idList(a.Holds))
			}
			b.WriteString("\n")
		}
	}
	if len(s.Groups) > 0 {
		b.WriteString("\nwavefront (each rank's last collective per group):\n")
		for _, f := range s.Groups {
			fmt.Fprintf(&b, "  %q (world ranks %v):", f.Group, f.Ranks)
			for _, p := range f.Members {
				if p.Unrecorded {
					fmt.Fprintf(&b, " %d: unrecorded;", p.Rank)
					continue
				}
				state := "in progress"
				switch {
				case p.Inferred:
					state = "no dump, at least"
				case p.Seq == 0:
					state = "none"
				case p.Failed:
					state = "failed"
				case p.Done:
					state = "done"
				}
				fmt.Fprintf(&b, " %d:#%d %s", p.Rank, p.Seq, state)
				if p.Kind != "" && !p.Done {
					fmt.Fprintf(&b, " %s", esc(p.Kind))
				}
				b.WriteString(";")
			}
			b.WriteString("\n")
		}
	}
	if len(s.Requests) > 0 {
		b.WriteString("\nrequests still held (every rank's session, and what each rank saw of it, in time):\n")
		for i, rq := range s.Requests {
			if i == maxTextRequests {
				fmt.Fprintf(&b, "  ... and %d more (--json lists them all)\n", len(s.Requests)-i)
				break
			}
			fmt.Fprintf(&b, "  request %d:", rq.Request)
			for _, ss := range rq.Sessions {
				fmt.Fprintf(&b, " rank %d %s %v %s %d/%d bytes, %v old", ss.Rank, esc(ss.Role), ss.Peers, esc(ss.State), ss.BytesDone, ss.BytesExpected,
					time.Duration(ss.AgeNS).Round(time.Millisecond))
				if ss.Lease != "" {
					fmt.Fprintf(&b, " (%s)", esc(ss.Lease))
				}
				b.WriteString(";")
			}
			if len(rq.Absent) > 0 {
				fmt.Fprintf(&b, " peers with no dump: %v", rq.Absent)
			}
			b.WriteString("\n")
			if len(rq.Timeline) > 0 {
				b.WriteString("    timeline:")
				// The same event at the same time on several ranks (the
				// TP ranks of one request) reads once, with its ranks.
				for i := 0; i < len(rq.Timeline); {
					e := rq.Timeline[i]
					ranks := []int{e.Rank}
					j := i + 1
					for ; j < len(rq.Timeline) && rq.Timeline[j].What == e.What && rq.Timeline[j].AtNS == e.AtNS; j++ {
						ranks = append(ranks, rq.Timeline[j].Rank)
					}
					fmt.Fprintf(&b, " %.3f ms %s (ranks %v);", float64(e.AtNS)/1e6, esc(e.What), ranks)
					i = j
				}
				b.WriteString("\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// maxTextRequests is how many requests the text lists.
const maxTextRequests = 8

// WriteJSON prints the story as JSON.
func (s *Story) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// esc is s with what is not printable escaped, as Go writes it in a
// quoted string (\n, \x1b, \u202e), and bytes that are not UTF-8 as \xNN:
// what a dump says stays on its line and cannot drive the terminal.
func esc(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || r != ' ' && !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == ' ' || unicode.IsPrint(r) && r != utf8.RuneError:
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// guardsText is the guards as text, each escaped (esc).
func guardsText(gs []Guard) string {
	var parts []string
	site := ""
	var vals []string
	flush := func() {
		if len(vals) == 0 {
			return
		}
		p := strings.Join(vals, ", ")
		if site != "" {
			p += " at " + esc(site)
		}
		parts = append(parts, p)
		vals = nil
	}
	for _, g := range gs {
		if g.Site != site {
			flush()
			site = g.Site
		}
		vals = append(vals, esc(g.String()))
	}
	flush()
	return strings.Join(parts, "; ")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// traceEvent is one Chrome trace (Perfetto) event.
type traceEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"` // microseconds
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  string         `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteTrace writes the dumps' last moments as a Chrome trace (open it in
// Perfetto): one process per rank, one track per group, each recorded
// operation a slice; one still in progress runs to the last time any dump
// recorded.
func WriteTrace(w io.Writer, dumps []*Dump) error {
	var end int64
	var start int64 = -1
	for _, d := range dumps {
		for _, o := range d.Ops {
			end = max(end, o.StartNS, o.EndNS)
			if o.StartNS > 0 && (start < 0 || o.StartNS < start) {
				start = o.StartNS
			}
		}
	}
	start = max(start, 0)
	evs := []traceEvent{}
	for _, d := range dumps {
		evs = append(evs, traceEvent{Name: "process_name", Ph: "M", Pid: d.WorldRank, Tid: "",
			Args: map[string]any{"name": fmt.Sprintf("world rank %d (%s)", d.WorldRank, d.Source)}})
		for _, o := range d.Ops {
			if o.StartNS == 0 {
				continue
			}
			e := o.EndNS
			if o.InProgress() || e < o.StartNS {
				e = end
			}
			name := fmt.Sprintf("%s #%d", o.Kind, o.Seq)
			if o.P2P() {
				name = fmt.Sprintf("%s peer %d tag %d", o.Kind, o.Peer, o.Tag)
			}
			args := map[string]any{"site": o.Site, "in_progress": o.InProgress()}
			if len(o.Guards) > 0 {
				args["guards"] = guardsText(o.Guards)
			}
			if o.Err != "" {
				args["err"] = o.Err
			}
			evs = append(evs, traceEvent{Name: name, Ph: "X", Ts: float64(o.StartNS-start) / 1e3, Dur: float64(e-o.StartNS) / 1e3,
				Pid: d.WorldRank, Tid: o.Group, Args: args})
		}
	}
	return json.NewEncoder(w).Encode(map[string]any{"traceEvents": evs, "displayTimeUnit": "ms"})
}

// idList renders request ids, the first few and a count.
func idList(ids []int64) string {
	const show = 8
	var parts []string
	for i, id := range ids {
		if i == show {
			parts = append(parts, fmt.Sprintf("... (%d more)", len(ids)-show))
			break
		}
		parts = append(parts, fmt.Sprint(id))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
