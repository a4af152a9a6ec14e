package reqtrace

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Replay is how a run replays a trace: which window of it, and at what
// pace. Spelled FILE[:from=D][:span=D][:scale=K][:poisson=R] (the value of
// rankrun's --arrival trace=...): from and span pick the rows that arrive
// in [from, from+span) of the recorded time (span unset: to the end);
// scale=K replays them at K times the recorded rate (their gaps divided
// by K); poisson=R keeps the rows' lengths and draws Poisson arrivals at
// R requests/s instead. The run's request count takes the window's first
// N rows (Window.First). The separator is a colon because sweeps list
// several arrivals separated by commas; a path with a colon cannot be
// named.
type Replay struct {
	Trace   *Trace
	Window  Window
	Scale   float64 // > 0; 1 replays at the recorded pace
	Poisson float64 // > 0: Poisson arrivals at this rate, requests/s; 0: the recorded times
}

// MaxScale bounds scale=K both ways: K in [1/MaxScale, MaxScale].
const MaxScale = 1e6

// ParseReplay parses a replay spec and loads its trace.
func ParseReplay(spec string) (Replay, error) {
	parts := strings.Split(spec, ":")
	path := strings.TrimSpace(parts[0])
	bad := func(field, rule string) (Replay, error) {
		return Replay{}, fmt.Errorf("reqtrace: trace=%s: %s: %s (the spec is FILE[:from=D][:span=D][:scale=K][:poisson=R])", spec, field, rule)
	}
	if path == "" {
		return bad("FILE", "the trace's path is empty")
	}
	r := Replay{Scale: 1}
	seen := map[string]bool{}
	for _, kv := range parts[1:] {
		key, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return bad(kv, "want key=value")
		}
		if seen[key] {
			return bad(key, "given twice")
		}
		seen[key] = true
		switch key {
		case "from", "span":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 || (key == "span" && d == 0) {
				return bad(key, "want a positive duration such as 10m (from may be 0)")
			}
			if key == "from" {
				r.Window.From = d
			} else {
				r.Window.Span = d
			}
		case "scale":
			k, err := strconv.ParseFloat(val, 64)
			if err != nil || !(k >= 1/MaxScale && k <= MaxScale) {
				return bad(key, "want a factor in [1e-6, 1e6] (2 replays at twice the recorded rate)")
			}
			r.Scale = k
		case "poisson":
			q, err := strconv.ParseFloat(val, 64)
			if err != nil || !(q > 0 && q <= 1e7) {
				return bad(key, "want a rate of requests per second in (0, 1e7]")
			}
			r.Poisson = q
		default:
			return bad(key, "unknown key (want from, span, scale or poisson)")
		}
	}
	if r.Poisson > 0 && seen["scale"] {
		return bad("scale", "poisson=R sets the arrivals itself; drop scale")
	}
	t, err := Load(path)
	if err != nil {
		return Replay{}, err
	}
	r.Trace = t
	return r, nil
}

// String is the spec, without the window's First (the run's request
// count says it).
func (r Replay) String() string {
	s := "trace="
	if r.Trace != nil {
		s += r.Trace.Name
	}
	if r.Window.From > 0 {
		s += ":from=" + r.Window.From.String()
	}
	if r.Window.Span > 0 {
		s += ":span=" + r.Window.Span.String()
	}
	if r.Scale != 1 && r.Scale != 0 {
		s += ":scale=" + strconv.FormatFloat(r.Scale, 'g', -1, 64)
	}
	if r.Poisson > 0 {
		s += ":poisson=" + strconv.FormatFloat(r.Poisson, 'g', -1, 64)
	}
	return s
}

// Requests is the replayed window: its rows, their times divided by the
// scale (the recorded times under poisson=R: the caller draws its own).
func (r Replay) Requests() ([]Request, error) {
	reqs, err := r.Trace.Select(r.Window)
	if err != nil {
		return nil, err
	}
	if r.Scale > 0 { // the span in float first: a small scale must not wrap a Duration
		if span := float64(reqs[len(reqs)-1].At) / r.Scale; span > float64(MaxSpan) {
			return nil, fmt.Errorf("reqtrace: %s: the window %s spans %.3g s at scale %g, more than %.0g s (raise scale= or narrow the window)",
				r.Trace.Name, r.Window, span/1e9, r.Scale, MaxSpan.Seconds())
		}
	}
	if r.Scale != 1 && r.Scale > 0 {
		for i := range reqs {
			reqs[i].At = time.Duration(math.Round(float64(reqs[i].At) / r.Scale))
		}
	}
	return reqs, nil
}

// RecordedRate is the window's requests per second at the recorded pace
// (scale 1): its gaps (rows less one) over the time from its first
// arrival to its last, as a Poisson rate's mean gap is 1/rate (0 when
// they all arrive at once).
func (r Replay) RecordedRate() (float64, error) {
	w := r.Window
	reqs, err := r.Trace.Select(w)
	if err != nil {
		return 0, err
	}
	span := reqs[len(reqs)-1].At
	if span <= 0 {
		return 0, nil
	}
	return float64(len(reqs)-1) / span.Seconds(), nil
}
