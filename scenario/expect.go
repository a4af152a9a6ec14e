package scenario

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/sim"
	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/kvpool"
	"github.com/rankrun/rankrun/transceiver"
)

// NamedErrors are the error names an expectation may use, with the sentinel
// each stands for (tested with errors.Is).
var NamedErrors = map[string]error{
	"ErrStalled":           executor.ErrStalled,
	"ErrInjected":          executor.ErrInjected,
	"ErrConfig":            executor.ErrConfig,
	"ErrDesync":            comm.ErrDesync,
	"ErrCollectiveTimeout": comm.ErrCollectiveTimeout,
	"ErrBroken":            comm.ErrBroken,
	"ErrMalformed":         transceiver.ErrMalformed,
	"ErrDeadlock":          sim.ErrDeadlock,
	"ErrPinned":            kvpool.ErrPinned, // a pool invariant: blocks released while a lease pins them
}

// ErrorName is the name of the first named error err wraps, in a fixed
// order ("" for none): what a failure is, in one word.
func ErrorName(err error) string {
	for _, n := range []string{"ErrDeadlock", "ErrDesync", "ErrCollectiveTimeout", "ErrStalled", "ErrInjected", "ErrMalformed", "ErrPinned", "ErrBroken", "ErrConfig"} {
		if errors.Is(err, NamedErrors[n]) {
			return n
		}
	}
	return ""
}

func errorNames() string {
	var s []string
	for k := range NamedErrors {
		s = append(s, k)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// Expectation is what one run must show.
type Expectation struct {
	set      bool
	OK       bool          // the run completes
	Errors   []string      // else: it fails with one of these named errors
	Within   time.Duration // ... within this long (0: the scenario's timeout)
	Contains []string      // the error (or the report's errors) contains each
	Bounds   []Bound
}

// Bound is FIGURE OP VALUE, where VALUE is a number, a duration (for
// millisecond figures) or another figure.
type Bound struct {
	Figure string
	Op     string
	Value  float64
	Other  string // a figure on the right-hand side
	text   string
}

func (b Bound) String() string { return b.text }

// figure is one number read from a report; ms figures compare against
// durations.
type figure struct {
	ms  bool
	get func(r *executor.Report) float64
	doc string
}

func dist(name string, f func(r *executor.Report) executor.Dist) map[string]figure {
	return map[string]figure{
		name + "-p50":  {true, func(r *executor.Report) float64 { return f(r).P50 }, ""},
		name + "-p90":  {true, func(r *executor.Report) float64 { return f(r).P90 }, ""},
		name + "-p99":  {true, func(r *executor.Report) float64 { return f(r).P99 }, ""},
		name + "-mean": {true, func(r *executor.Report) float64 { return f(r).Mean }, ""},
		name + "-max":  {true, func(r *executor.Report) float64 { return f(r).Max }, ""},
		name + "-n":    {false, func(r *executor.Report) float64 { return float64(f(r).N) }, ""},
	}
}

var figures = func() map[string]figure {
	m := map[string]figure{
		"completed":        {false, func(r *executor.Report) float64 { return float64(r.RequestsCompleted) }, ""},
		"failed":           {false, func(r *executor.Report) float64 { return float64(r.RequestsFailed) }, ""},
		"cancelled":        {false, func(r *executor.Report) float64 { return float64(r.RequestsCancelled) }, ""},
		"leaked":           {false, func(r *executor.Report) float64 { return float64(r.LeakedBlocks) }, ""},
		"pinned":           {false, func(r *executor.Report) float64 { return float64(r.PinnedBlocksAtEnd) }, ""},
		"bytes-moved":      {false, func(r *executor.Report) float64 { return float64(r.BytesMoved) }, ""},
		"bytes-verified":   {false, func(r *executor.Report) float64 { return float64(r.BytesVerified) }, ""},
		"bytes-discarded":  {false, func(r *executor.Report) float64 { return float64(r.BytesDiscarded) }, ""},
		"collectives":      {false, func(r *executor.Report) float64 { return float64(r.Collectives) }, ""},
		"idle-collectives": {false, func(r *executor.Report) float64 { return float64(r.IdleCollectives) }, ""},
		"errors":           {false, func(r *executor.Report) float64 { return float64(len(r.Errors)) }, ""},
		"duration":         {true, func(r *executor.Report) float64 { return r.DurationS * 1000 }, ""},
		"throughput":       {false, func(r *executor.Report) float64 { return r.ThroughputRPS }, ""},
		"max-poll-wait": {true, func(r *executor.Report) float64 {
			v := 0.0
			for _, in := range r.Instances {
				v = max(v, in.MaxPollWaitMs)
			}
			return v
		}, ""},
	}
	for _, side := range []int{0, 1} {
		role := []string{"ctx", "gen"}[side]
		m[role+"-peak-kv"] = figure{false, func(r *executor.Report) float64 { return r.Instances[side].PeakKVUtil }, ""}
		m[role+"-peak-pinned"] = figure{false, func(r *executor.Report) float64 { return r.Instances[side].PeakPinnedUtil }, ""}
		m[role+"-cancel-refused"] = figure{false, func(r *executor.Report) float64 { return float64(r.Instances[side].CancelRefused) }, ""}
		m[role+"-admission-blocked"] = figure{false, func(r *executor.Report) float64 { return float64(r.Instances[side].AdmissionBlocked) }, ""}
		m[role+"-idle-collectives"] = figure{false, func(r *executor.Report) float64 { return float64(r.Instances[side].IdleCollectives) }, ""}
		m[role+"-idle-reaped"] = figure{false, func(r *executor.Report) float64 { return float64(r.Instances[side].IdleReaped) }, ""}
	}
	for name, f := range map[string]func(r *executor.Report) executor.Dist{
		"ttft":       func(r *executor.Report) executor.Dist { return r.TTFTMs },
		"handover":   func(r *executor.Report) executor.Dist { return r.IdleHandoverMs },
		"idle-step":  func(r *executor.Report) executor.Dist { return r.IdleStepMs },
		"busy-step":  func(r *executor.Report) executor.Dist { return r.BusyStepMs },
		"reap-delay": func(r *executor.Report) executor.Dist { return r.ReapDelayMs },
		"transfer":   func(r *executor.Report) executor.Dist { return r.TransferMs },
	} {
		for k, v := range dist(name, f) {
			m[k] = v
		}
	}
	return m
}()

// Figures lists every figure a bound may name, sorted.
func Figures() []string {
	var s []string
	for k := range figures {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

var ops = []string{"<=", ">=", "==", "!=", "<", ">"}

// addBound parses a line that may only bound figures or name message text
// (expect-sim: the outcome itself is expect:'s).
func (e *Expectation) addBound(v string) error {
	if f := strings.Fields(v); len(f) > 0 && (f[0] == "ok" || f[0] == "error") {
		return fmt.Errorf("%q: an expect-sim line bounds a figure or names message text; the outcome is expect:'s", v)
	}
	return e.add(v)
}

// with returns e with extra's bounds and message texts added.
func (e Expectation) with(extra Expectation) Expectation {
	e.Bounds = append(slices.Clone(e.Bounds), extra.Bounds...)
	e.Contains = append(slices.Clone(e.Contains), extra.Contains...)
	return e
}

// Add parses one expectation line (the text after "expect:") into e.
func (e *Expectation) Add(v string) error { return e.add(v) }

// add parses one expectation line into e.
func (e *Expectation) add(v string) error {
	e.set = true
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return errors.New("empty expectation: want ok, error NAME [within DURATION], message contains \"TEXT\" or FIGURE OP VALUE")
	}
	switch fields[0] {
	case "ok":
		if len(fields) != 1 {
			return fmt.Errorf("%q: ok takes nothing after it (put bounds on their own expect: lines)", v)
		}
		if len(e.Errors) > 0 {
			return errors.New("both ok and error expected")
		}
		e.OK = true
		return nil
	case "error":
		if e.OK {
			return errors.New("both ok and error expected")
		}
		if len(e.Errors) > 0 {
			return errors.New("error outcome given twice")
		}
		if len(fields) != 2 && !(len(fields) == 4 && fields[2] == "within") {
			return fmt.Errorf("%q: want error NAME[|NAME...] [within DURATION]", v)
		}
		for _, n := range strings.Split(fields[1], "|") {
			if _, ok := NamedErrors[n]; !ok {
				return fmt.Errorf("unknown error %q: valid errors are %s", n, errorNames())
			}
			e.Errors = append(e.Errors, n)
		}
		if len(fields) == 4 {
			d, err := time.ParseDuration(fields[3])
			if err != nil || d <= 0 {
				return fmt.Errorf("within %q: want a positive duration", fields[3])
			}
			e.Within = d
		}
		return nil
	case "message":
		rest := strings.TrimSpace(strings.TrimPrefix(v, "message"))
		if !strings.HasPrefix(rest, "contains") {
			return fmt.Errorf("%q: want message contains \"TEXT\"", v)
		}
		q := strings.TrimSpace(strings.TrimPrefix(rest, "contains"))
		text, err := strconv.Unquote(q)
		if err != nil || text == "" {
			return fmt.Errorf("%q: the text must be a non-empty double-quoted string", q)
		}
		e.Contains = append(e.Contains, text)
		return nil
	}
	// FIGURE OP VALUE (spaces around OP optional).
	var b Bound
	for _, op := range ops {
		if i := strings.Index(v, op); i > 0 {
			b.Figure, b.Op = strings.TrimSpace(v[:i]), op
			rhs := strings.TrimSpace(v[i+len(op):])
			f, ok := figures[b.Figure]
			if !ok {
				return fmt.Errorf("unknown figure %q: valid figures are %s", b.Figure, strings.Join(Figures(), ", "))
			}
			switch g, isFig := figures[rhs]; {
			case isFig:
				if g.ms != f.ms {
					return fmt.Errorf("%q: %s and %s are not in the same unit", v, b.Figure, rhs)
				}
				b.Other = rhs
			case f.ms:
				d, err := time.ParseDuration(rhs)
				if err != nil {
					return fmt.Errorf("%q: %s is a time: want a duration such as 100ms", v, b.Figure)
				}
				b.Value = float64(d) / float64(time.Millisecond)
			default:
				x, err := strconv.ParseFloat(rhs, 64)
				if err != nil {
					return fmt.Errorf("%q: want a number or a figure after %s", v, op)
				}
				b.Value = x
			}
			b.text = b.Figure + " " + b.Op + " " + rhs
			e.Bounds = append(e.Bounds, b)
			return nil
		}
	}
	return fmt.Errorf("%q: want ok, error NAME [within DURATION], message contains \"TEXT\" or FIGURE OP VALUE (FIGURE one of %s)",
		v, strings.Join(Figures(), ", "))
}

// bounds reports whether a bound names figure (it then replaces the implicit
// check on that figure).
func (e *Expectation) bounds(figure string) bool {
	for _, b := range e.Bounds {
		if b.Figure == figure {
			return true
		}
	}
	return false
}

// Validate reports an expectation that cannot judge a run: one with no
// outcome (ok or error NAME), or bounds on a run expected to fail.
func (e *Expectation) Validate() error { return e.validate() }

func (e *Expectation) validate() error {
	if !e.OK && len(e.Errors) == 0 {
		return errors.New("no outcome: one line must be ok or error NAME")
	}
	if !e.OK && len(e.Bounds) > 0 {
		return fmt.Errorf("bound %q on a run expected to fail: a failed run has no report", e.Bounds[0])
	}
	return nil
}

func (e *Expectation) lines() []string {
	var out []string
	if e.OK {
		out = append(out, "ok")
	}
	if len(e.Errors) > 0 {
		l := "error " + strings.Join(e.Errors, "|")
		if e.Within > 0 {
			l += " within " + e.Within.String()
		}
		out = append(out, l)
	}
	for _, c := range e.Contains {
		out = append(out, "message contains "+strconv.Quote(c))
	}
	for _, b := range e.Bounds {
		out = append(out, b.text)
	}
	return out
}

// Outcome is what one run did.
type Outcome struct {
	Backend string // local, sim or mpi
	Replay  bool   // the replay under test was on
	Report  *executor.Report
	Err     error
	Elapsed time.Duration
	Hung    bool // did not return within its deadline (and a grace)
	// HostGaveUp: a simulated run stopped at the wall limit, before its
	// virtual end (no verdict either way; Err says so).
	HostGaveUp bool
}

// check compares an outcome with e; it returns "" or the first reason the
// outcome does not match.
func (e *Expectation) check(o Outcome, requests int, timeout time.Duration) []string {
	var why []string
	if o.Hung {
		if o.Err != nil && o.Backend == "sim" {
			return []string{fmt.Sprintf("hang: no result within %v: %v", timeout, o.Err)}
		}
		return []string{fmt.Sprintf("hang: no result within %v", timeout)}
	}
	if o.HostGaveUp {
		return []string{o.Err.Error()}
	}
	if o.Err == nil && o.Report == nil {
		return []string{"no report and no error"}
	}
	msg := ""
	if o.Err != nil {
		msg = o.Err.Error()
	} else {
		msg = strings.Join(o.Report.Errors, "; ")
	}
	if e.OK {
		if o.Err != nil {
			return []string{fmt.Sprintf("expected ok, got error after %v: %v", o.Elapsed.Round(time.Millisecond), o.Err)}
		}
		r := o.Report
		if len(r.Errors) > 0 {
			why = append(why, fmt.Sprintf("report errors: %s", strings.Join(r.Errors, "; ")))
		}
		if r.LeakedBlocks != 0 || r.PinnedBlocksAtEnd != 0 {
			why = append(why, fmt.Sprintf("%d blocks leaked, %d pinned at the end", r.LeakedBlocks, r.PinnedBlocksAtEnd))
		}
		if r.BytesVerified+r.BytesDiscarded != r.BytesMoved && !e.bounds("bytes-verified") {
			why = append(why, fmt.Sprintf("%d bytes moved but %d verified and %d discarded (of failed requests)", r.BytesMoved, r.BytesVerified, r.BytesDiscarded))
		}
		if n := r.RequestsCompleted + r.RequestsFailed + r.RequestsCancelled; n != requests {
			why = append(why, fmt.Sprintf("%d of %d requests accounted for", n, requests))
		}
		for _, b := range e.Bounds {
			got := figures[b.Figure].get(r)
			want := b.Value
			if b.Other != "" {
				want = figures[b.Other].get(r)
			}
			if !compare(got, b.Op, want) {
				why = append(why, fmt.Sprintf("%s: got %s", b.text, fmtFigure(b.Figure, got)))
			}
		}
	} else {
		if o.Err == nil {
			return []string{fmt.Sprintf("expected error %s, but the run completed in %v (%d completed, %d failed, %d cancelled)",
				strings.Join(e.Errors, "|"), o.Elapsed.Round(time.Millisecond), o.Report.RequestsCompleted, o.Report.RequestsFailed, o.Report.RequestsCancelled)}
		}
		match := false
		for _, n := range e.Errors {
			if errors.Is(o.Err, NamedErrors[n]) {
				match = true
			}
		}
		if !match {
			why = append(why, fmt.Sprintf("expected error %s, got: %v", strings.Join(e.Errors, "|"), o.Err))
		}
		if within := e.Within; within > 0 && o.Elapsed > within {
			why = append(why, fmt.Sprintf("error came after %v, expected within %v", o.Elapsed.Round(time.Millisecond), within))
		}
	}
	for _, c := range e.Contains {
		if !strings.Contains(msg, c) {
			why = append(why, fmt.Sprintf("message does not contain %q: %s", c, msg))
		}
	}
	return why
}

func compare(a float64, op string, b float64) bool {
	switch op {
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	case ">=":
		return a >= b
	case "==":
		return a == b
	case "!=":
		return a != b
	}
	return false
}

func fmtFigure(name string, v float64) string {
	if figures[name].ms {
		return time.Duration(v * float64(time.Millisecond)).Round(10 * time.Microsecond).String()
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Summary renders the figures a reader needs to judge an outcome.
func (o Outcome) Summary() string {
	if o.Hung {
		return "hung"
	}
	if o.HostGaveUp {
		return "the host gave up"
	}
	if o.Err != nil {
		return fmt.Sprintf("error after %v: %v", o.Elapsed.Round(time.Millisecond), o.Err)
	}
	r := o.Report
	return fmt.Sprintf("ok in %v: %d completed, %d failed, %d cancelled; ttft p50 %s; idle step p50 %s; leaked %d, pinned %d; %d/%d bytes verified",
		o.Elapsed.Round(time.Millisecond), r.RequestsCompleted, r.RequestsFailed, r.RequestsCancelled,
		fmtFigure("ttft-p50", r.TTFTMs.P50), fmtFigure("idle-step-p50", r.IdleStepMs.P50), r.LeakedBlocks, r.PinnedBlocksAtEnd,
		r.BytesVerified, r.BytesMoved)
}
