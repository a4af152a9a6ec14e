package executor

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/rankrun/rankrun/reqtrace"
	"github.com/rankrun/rankrun/request"
)

// ArrivalKind is how requests arrive.
type ArrivalKind uint8

// Arrival patterns.
const (
	Burst   ArrivalKind = iota + 1 // all at time zero
	Rate                           // one every 1/Rate seconds
	Poisson                        // exponential gaps with mean 1/Rate (seeded)
	Closed                         // closed loop: at most Concurrency outstanding
	Traced                         // a production trace's window replayed (Arrival.Trace)
)

// Arrival is a parsed arrival pattern.
type Arrival struct {
	Kind        ArrivalKind
	Rate        float64 // requests per second (Rate, Poisson)
	Concurrency int     // outstanding requests (Closed)
	// Trace is the replayed trace, its window and pace (Traced): the
	// requests' lengths are the trace's, and so are their arrival times
	// (scaled) unless Trace.Poisson draws them.
	Trace reqtrace.Replay
}

// open reports whether requests arrive at times of their own (not in a
// burst or a closed loop).
func (a Arrival) open() bool { return a.Kind == Rate || a.Kind == Poisson || a.Kind == Traced }

func (a Arrival) String() string {
	switch a.Kind {
	case Burst:
		return "burst"
	case Rate:
		return "rate=" + strconv.FormatFloat(a.Rate, 'g', -1, 64)
	case Poisson:
		return "poisson=" + strconv.FormatFloat(a.Rate, 'g', -1, 64)
	case Closed:
		return "closed=" + strconv.Itoa(a.Concurrency)
	case Traced:
		return a.Trace.String()
	}
	return "?"
}

// MaxRate is the highest arrival rate a workload takes, requests/s (the
// errors spell it 1e7).
const MaxRate = 1e7

// MaxArrivalSpan is the longest a workload's open-loop arrivals may span
// (Requests / Rate): 1e8 s, about 3.2 years, far past any run's deadline
// and far below what a Duration holds (a rate of 1e-10 wrapped the second
// arrival to a negative time).
const MaxArrivalSpan = 1e8 * time.Second

// MinRate is the lowest arrival rate a workload of requests takes: its
// arrivals then span MaxArrivalSpan.
func MinRate(requests int) float64 { return float64(requests) / MaxArrivalSpan.Seconds() }

// ParseArrival parses "burst", "rate=R", "poisson=R" (R requests per second),
// "closed=C" (C requests outstanding: closed=1 is one at a time) or
// "trace=FILE[:from=D][:span=D][:scale=K][:poisson=R]" (a production
// trace's window replayed, reqtrace.ParseReplay: the file is read here).
func ParseArrival(s string) (Arrival, error) {
	s = strings.TrimSpace(s)
	if s == "burst" {
		return Arrival{Kind: Burst}, nil
	}
	key, val, ok := strings.Cut(s, "=")
	bad := func(rule string) (Arrival, error) {
		return Arrival{}, fmt.Errorf("executor: arrival %q: %s (use burst, rate=R, poisson=R, closed=C or trace=FILE)", s, rule)
	}
	if !ok {
		return bad("unknown pattern")
	}
	switch key {
	case "rate", "poisson":
		r, err := strconv.ParseFloat(val, 64)
		if err != nil || !(r > 0 && r <= MaxRate) { // NaN fails every comparison
			return bad("the rate must be a number of requests per second in (0, 1e7]") // MaxRate
		}
		k := Rate
		if key == "poisson" {
			k = Poisson
		}
		return Arrival{Kind: k, Rate: r}, nil
	case "closed":
		c, err := strconv.Atoi(val)
		if err != nil || c <= 0 {
			return bad("the concurrency must be a positive integer")
		}
		return Arrival{Kind: Closed, Concurrency: c}, nil
	case "trace":
		r, err := reqtrace.ParseReplay(val)
		if err != nil {
			return Arrival{}, fmt.Errorf("executor: arrival: %w", err)
		}
		return Arrival{Kind: Traced, Trace: r}, nil
	}
	return bad("unknown pattern")
}

// Workload describes the requests of a run.
type Workload struct {
	Requests     int     // number of requests (>= 1)
	InputTokens  int     // prompt length in tokens: the KV a request needs (>= 1)
	InputJitter  float64 // input lengths vary uniformly by +- this fraction [0, 1)
	OutputTokens int     // tokens generated per request (>= 1)
	Arrival      Arrival
	Seed         uint64
	// MaxInput clips a traced request's prompt to this many tokens (0: no
	// clip); Config.Defaults sets it to what both pools hold.
	MaxInput int
}

// TraceWorkload is the workload that replays arr's trace window: its
// first requests rows (0: the whole window), their lengths and times.
// InputTokens and OutputTokens are the window's longest (the pools are
// sized for them); the seed draws the arrivals of a poisson=R replay.
func TraceWorkload(arr Arrival, requests int, seed uint64) (Workload, error) {
	if arr.Kind != Traced {
		return Workload{}, fmt.Errorf("executor: workload arrival %s: not a trace", arr)
	}
	if requests < 0 {
		return Workload{}, fmt.Errorf("executor: workload requests %d: must be at least 1 (or 0: the whole window)", requests)
	}
	arr.Trace.Window.First = requests
	reqs, err := arr.Trace.Requests()
	if err != nil {
		return Workload{}, fmt.Errorf("executor: workload: %w", err)
	}
	arr.Trace.Window.First = len(reqs)
	l := reqtrace.Measure(reqs)
	return Workload{Requests: len(reqs), InputTokens: l.InputMax, OutputTokens: l.OutputMax, Arrival: arr, Seed: seed}, nil
}

// traced is the replayed window's rows, their prompts clipped (nil for a
// synthetic workload).
func (w Workload) traced() []reqtrace.Request {
	if w.Arrival.Kind != Traced {
		return nil
	}
	reqs, err := w.Arrival.Trace.Requests()
	if err != nil {
		return nil // Validate has said so
	}
	if w.MaxInput > 0 {
		for i := range reqs {
			reqs[i].Input = min(reqs[i].Input, w.MaxInput)
		}
	}
	return reqs
}

// digest is a hash of a traced workload's requests (their lengths and
// times, as replayed); 0 for any other workload.
func (w Workload) digest() uint64 {
	if w.Arrival.Kind != Traced {
		return 0
	}
	h := fnv.New64a()
	var b [8]byte
	put := func(v int64) {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
	}
	for _, r := range w.Generate() {
		put(int64(r.Tokens))
		put(int64(r.Output))
		put(int64(r.At))
	}
	return h.Sum64()
}

// OfferedRate is a traced workload's arrival rate, requests/s: its
// poisson=R, or its gaps (requests less one) over the span of their
// replayed (scaled) arrivals, as a Poisson rate's mean gap is 1/rate; 0
// when they all arrive at once or for any other workload.
func (w Workload) OfferedRate() float64 {
	if w.Arrival.Kind != Traced {
		return 0
	}
	if w.Arrival.Trace.Poisson > 0 {
		return w.Arrival.Trace.Poisson
	}
	reqs, err := w.Arrival.Trace.Requests()
	if err != nil || len(reqs) == 0 || reqs[len(reqs)-1].At <= 0 {
		return 0
	}
	return float64(len(reqs)-1) / reqs[len(reqs)-1].At.Seconds() // gaps over the span, as a Poisson rate's
}

// Clipped is how many of a traced workload's prompts MaxInput clips.
func (w Workload) Clipped() int {
	if w.Arrival.Kind != Traced || w.MaxInput == 0 {
		return 0
	}
	reqs, err := w.Arrival.Trace.Requests()
	if err != nil {
		return 0
	}
	n := 0
	for _, r := range reqs {
		if r.Input > w.MaxInput {
			n++
		}
	}
	return n
}

// PoolNeed is the most blocks one rank can need to hold the whole
// workload at once, blocksFor giving a request's blocks on that rank:
// every request at its longest (a trace's each at its own length).
func (w Workload) PoolNeed(blocksFor func(tokens int) int) int {
	if reqs := w.traced(); reqs != nil {
		n := 0
		for _, r := range reqs {
			n += blocksFor(r.Input + r.Output)
		}
		return n
	}
	return blocksFor(w.maxTokens()+w.OutputTokens) * w.Requests
}

// Validate names the first field that breaks its rule.
func (w Workload) Validate() error {
	switch {
	case w.Requests < 1:
		return fmt.Errorf("executor: workload requests %d: must be at least 1", w.Requests)
	case w.Requests > 10_000_000:
		return fmt.Errorf("executor: workload requests %d: at most 10000000", w.Requests)
	case w.InputTokens < 1:
		return fmt.Errorf("executor: workload input tokens %d: must be at least 1", w.InputTokens)
	case w.OutputTokens < 1:
		return fmt.Errorf("executor: workload output tokens %d: must be at least 1 (the first token is the prefill's)", w.OutputTokens)
	case !(w.InputJitter >= 0 && w.InputJitter < 1): // NaN too
		return fmt.Errorf("executor: workload input jitter %g: must be in [0, 1)", w.InputJitter)
	case w.Arrival.Kind == 0:
		return fmt.Errorf("executor: workload arrival is not set")
	case w.Arrival.Kind == Traced && w.Arrival.Trace.Trace == nil:
		return fmt.Errorf("executor: workload arrival %s: the trace is not loaded (executor.ParseArrival loads it)", w.Arrival)
	case w.Arrival.Kind == Traced && w.Arrival.Trace.Window.First != w.Requests:
		return fmt.Errorf("executor: workload requests %d: the trace window's first %d are replayed (executor.TraceWorkload sets both)", w.Requests, w.Arrival.Trace.Window.First)
	case w.Arrival.Kind == Traced && w.Arrival.Trace.Poisson > 0 && float64(w.Requests-1)/w.Arrival.Trace.Poisson > MaxArrivalSpan.Seconds():
		return fmt.Errorf("executor: workload arrival %s for %d requests: they would arrive over %.3g s, more than %.0g s; the rate must be at least %.3g requests/s",
			w.Arrival, w.Requests, float64(w.Requests-1)/w.Arrival.Trace.Poisson, MaxArrivalSpan.Seconds(), MinRate(w.Requests))
	case w.Arrival.Kind == Traced && w.InputJitter != 0:
		return fmt.Errorf("executor: workload input jitter %g: a trace's lengths are its own", w.InputJitter)
	case w.MaxInput < 0:
		return fmt.Errorf("executor: workload max input %d: must not be negative (0: no clip)", w.MaxInput)
	case (w.Arrival.Kind == Rate || w.Arrival.Kind == Poisson) && w.Arrival.Rate < MinRate(w.Requests):
		return fmt.Errorf("executor: workload arrival %s for %d requests: they would arrive over %.3g s, more than %.0g s; the rate must be at least %.3g requests/s",
			w.Arrival, w.Requests, float64(w.Requests)/w.Arrival.Rate, MaxArrivalSpan.Seconds(), MinRate(w.Requests))
	}
	return nil
}

// maxTokens is the longest input a request of the workload can have.
func (w Workload) maxTokens() int {
	if w.Arrival.Kind == Traced {
		if w.MaxInput > 0 {
			return min(w.InputTokens, w.MaxInput)
		}
		return w.InputTokens
	}
	return w.InputTokens + int(float64(w.InputTokens)*w.InputJitter)
}

// Req is one generated request.
type Req struct {
	ID     request.ID
	Tokens int
	Output int
	At     time.Duration // arrival offset from the start (open-loop patterns)
}

// Generate returns the workload's requests, deterministic for a seed. Every
// rank can call it and get the same list.
func (w Workload) Generate() []Req {
	rng := rand.New(rand.NewPCG(w.Seed, 0x52524e))
	if w.Arrival.Kind == Traced {
		reqs := w.traced()
		out := make([]Req, len(reqs))
		var at time.Duration
		for i, r := range reqs {
			if w.Arrival.Trace.Poisson > 0 {
				r.At = at
				at += time.Duration(rng.ExpFloat64() * float64(time.Second) / w.Arrival.Trace.Poisson)
			}
			out[i] = Req{ID: request.ID(i + 1), Tokens: r.Input, Output: r.Output, At: r.At}
		}
		return out
	}
	out := make([]Req, w.Requests)
	var at time.Duration
	for i := range out {
		tokens := w.InputTokens
		if w.InputJitter > 0 {
			d := int(float64(w.InputTokens) * w.InputJitter)
			tokens += rng.IntN(2*d+1) - d
			tokens = max(tokens, 1)
		}
		out[i] = Req{ID: request.ID(i + 1), Tokens: tokens, Output: w.OutputTokens, At: at}
		switch w.Arrival.Kind {
		case Rate:
			at += time.Duration(float64(time.Second) / w.Arrival.Rate)
		case Poisson:
			at += time.Duration(rng.ExpFloat64() * float64(time.Second) / w.Arrival.Rate)
		}
	}
	return out
}
