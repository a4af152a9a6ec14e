package executor

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

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
)

// Arrival is a parsed arrival pattern.
type Arrival struct {
	Kind        ArrivalKind
	Rate        float64 // requests per second (Rate, Poisson)
	Concurrency int     // outstanding requests (Closed)
}

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

// ParseArrival parses "burst", "rate=R", "poisson=R" (R requests per second)
// or "closed=C" (C requests outstanding: closed=1 is one at a time).
func ParseArrival(s string) (Arrival, error) {
	s = strings.TrimSpace(s)
	if s == "burst" {
		return Arrival{Kind: Burst}, nil
	}
	key, val, ok := strings.Cut(s, "=")
	bad := func(rule string) (Arrival, error) {
		return Arrival{}, fmt.Errorf("executor: arrival %q: %s (use burst, rate=R, poisson=R or closed=C)", s, rule)
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
	case (w.Arrival.Kind == Rate || w.Arrival.Kind == Poisson) && w.Arrival.Rate < MinRate(w.Requests):
		return fmt.Errorf("executor: workload arrival %s for %d requests: they would arrive over %.3g s, more than %.0g s; the rate must be at least %.3g requests/s",
			w.Arrival, w.Requests, float64(w.Requests)/w.Arrival.Rate, MaxArrivalSpan.Seconds(), MinRate(w.Requests))
	}
	return nil
}

// maxTokens is the longest input a request of the workload can have.
func (w Workload) maxTokens() int {
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
