// Package goodput finds a serving system's goodput as DistServe defines
// it: the highest request rate at which at least a share of the requests
// meet both latency objectives (time to first token and time per output
// token). The search is a bisection over the arrival rate; what a rate's
// run is (simulation, a real job) is the caller's Probe, so the package
// holds the decisions and none of the running.
//
// A rate's attainment is measured on n requests, so it carries sampling
// noise from the workload (Poisson arrivals, prompt lengths): its Wilson
// interval says how far the true attainment may be, and RequestsFor says
// what n makes that interval as narrow as asked. A probe whose interval
// straddles the target share is reported as such: its verdict could flip
// on another seed.
package goodput

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// SLO is the latency objectives and the share of requests that must meet
// both.
type SLO struct {
	TTFT  time.Duration // a request's time to first token at most this
	TPOT  time.Duration // its time per output token after the first at most this
	Share float64       // in (0, 1]
}

func (s SLO) String() string {
	return fmt.Sprintf(">= %g%% of requests within TTFT %v and TPOT %v", 100*s.Share, s.TTFT, s.TPOT)
}

// Validate names the first field that breaks its rule.
func (s SLO) Validate() error {
	switch {
	case s.TTFT <= 0:
		return fmt.Errorf("goodput: SLO TTFT = %v: must be positive", s.TTFT)
	case s.TPOT <= 0:
		return fmt.Errorf("goodput: SLO TPOT = %v: must be positive", s.TPOT)
	case !(s.Share > 0 && s.Share <= 1):
		return fmt.Errorf("goodput: SLO share = %g: must be in (0, 1]", s.Share)
	}
	return nil
}

// Met reports whether a completed request with this TTFT and TPOT met
// both objectives.
func (s SLO) Met(ttft, tpot time.Duration) bool { return ttft <= s.TTFT && tpot <= s.TPOT }

// Attainment is how many of a run's N requests met the SLO (a request
// that failed or never finished did not).
type Attainment struct {
	Met, N int
}

// Share is Met/N (0 for no requests).
func (a Attainment) Share() float64 {
	if a.N == 0 {
		return 0
	}
	return float64(a.Met) / float64(a.N)
}

// Z95 is the normal quantile of a two-sided 95% interval.
const Z95 = 1.959964

// Interval is the Wilson score interval of the attainment at normal
// quantile z (Z95 for 95%): where the true share may be, given Met of N.
// Unlike the normal approximation it stays inside [0, 1] and is sound at
// shares near 1, where SLO targets sit.
func (a Attainment) Interval(z float64) (lo, hi float64) {
	if a.N == 0 {
		return 0, 1
	}
	n, p := float64(a.N), a.Share()
	den := 1 + z*z/n
	mid := (p + z*z/(2*n)) / den
	half := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / den
	lo, hi = max(0, mid-half), min(1, mid+half)
	// At the ends the bound is exact (rounding leaves it a hair inside).
	if a.Met == a.N {
		hi = 1
	}
	if a.Met == 0 {
		lo = 0
	}
	return lo, hi
}

// RequestsFor is the fewest requests per run whose attainment's interval
// at share, at normal quantile z, is at most ±half wide (the normal
// approximation, n = z^2 s(1-s)/half^2): 865 for ±2% around 90% at 95%,
// 139 for ±5%. half must be positive (else it returns math.MaxInt); a
// share of 0 or 1 needs none.
func RequestsFor(share, half, z float64) int {
	if !(half > 0) {
		return math.MaxInt
	}
	n := z * z * share * (1 - share) / (half * half)
	return int(math.Ceil(n - 1e-9*n)) // an exact n stays n despite rounding
}

// Probe runs the system at rate (requests per second) and returns its
// attainment.
type Probe func(ctx context.Context, rate float64) (Attainment, error)

// Options bound the search.
type Options struct {
	// Lo and Hi bracket the search: the first two rates probed. If Hi
	// passes the search doubles it, up to MaxRate; if Lo fails, halves it,
	// down to MinRate.
	Lo, Hi           float64
	MinRate, MaxRate float64 // 0: Lo/64 and Hi*64
	// RelTol ends the bisection when the bracket's width is at most
	// RelTol of its lower end (0: 0.05).
	RelTol float64
	// MaxProbes bounds the probes of the whole search (0: 24).
	MaxProbes int
	// Z is the normal quantile of the intervals reported (0: Z95).
	Z float64
}

// Step is one probe of the search.
type Step struct {
	Rate   float64
	Att    Attainment
	Pass   bool // the attainment's share reached the SLO's
	Unsure bool // its interval straddles the SLO's share: another seed may decide otherwise
}

// Result is a search's outcome. Goodput is the highest rate probed that
// passed (0 when none did); Above is the lowest rate probed that failed (0:
// none failed). The search never probes above a failure, so every rate
// probed below Goodput passed too: it assumes the attainment falls with
// the rate, and a system that fails only in a window of rates below its
// goodput can hide it.
type Result struct {
	Goodput float64
	Above   float64
	Steps   []Step
	// Why says how the search ended: bracketed to RelTol, out of probes,
	// no rate down to MinRate passed, or every rate up to MaxRate did.
	Why string
}

// ErrOptions is a bad search bracket or bound.
var ErrOptions = errors.New("goodput: bad options")

// Validate names the first option that breaks its rule (after the
// defaults for the zero ones).
func (o Options) Validate() error { return o.defaults() }

func (o *Options) defaults() error {
	if !(o.Lo > 0) || !(o.Hi > o.Lo) {
		return fmt.Errorf("%w: want 0 < lo < hi, got lo %g, hi %g", ErrOptions, o.Lo, o.Hi)
	}
	if o.MinRate == 0 {
		o.MinRate = o.Lo / 64
	}
	if o.MaxRate == 0 {
		o.MaxRate = o.Hi * 64
	}
	if o.RelTol == 0 {
		o.RelTol = 0.05
	}
	if o.MaxProbes == 0 {
		o.MaxProbes = 24
	}
	if o.Z == 0 {
		o.Z = Z95
	}
	switch {
	case !(o.MinRate > 0) || o.MinRate > o.Lo:
		return fmt.Errorf("%w: min rate %g: must be in (0, lo = %g]", ErrOptions, o.MinRate, o.Lo)
	case o.MaxRate < o.Hi:
		return fmt.Errorf("%w: max rate %g: must be at least hi = %g", ErrOptions, o.MaxRate, o.Hi)
	case !(o.RelTol > 0 && o.RelTol < 1):
		return fmt.Errorf("%w: relative tolerance %g: must be in (0, 1)", ErrOptions, o.RelTol)
	case o.MaxProbes < 2:
		return fmt.Errorf("%w: max probes %d: must be at least 2", ErrOptions, o.MaxProbes)
	}
	return nil
}

// Find searches for slo's goodput: it probes Lo and Hi, widens the
// bracket until Lo passes and Hi fails, then bisects it (at the geometric
// mean: rates span orders of magnitude) until it is RelTol narrow. A probe
// error ends the search with it, and the probes that finished.
func Find(ctx context.Context, slo SLO, probe Probe, o Options) (Result, error) {
	if err := slo.Validate(); err != nil {
		return Result{}, err
	}
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	var res Result
	try := func(rate float64) (bool, error) {
		a, err := probe(ctx, rate)
		if err != nil {
			return false, fmt.Errorf("goodput: the probe at %g requests/s: %w", rate, err)
		}
		lo, hi := a.Interval(o.Z)
		s := Step{Rate: rate, Att: a, Pass: a.N > 0 && a.Share() >= slo.Share, Unsure: lo < slo.Share && hi >= slo.Share}
		res.Steps = append(res.Steps, s)
		return s.Pass, nil
	}
	lo, hi := o.Lo, o.Hi
	hiFailed := false
	// The lower end: halve until a rate passes.
	for {
		if len(res.Steps) >= o.MaxProbes {
			res.Why = fmt.Sprintf("out of probes (%d) before any rate passed", o.MaxProbes)
			return res.settle(), nil
		}
		ok, err := try(lo)
		if err != nil {
			return res.settle(), err
		}
		if ok {
			break
		}
		if lo/2 < o.MinRate {
			res.Why = fmt.Sprintf("no rate down to %g requests/s meets the SLO", lo)
			return res.settle(), nil
		}
		hi, hiFailed, lo = lo, true, lo/2
	}
	// The upper end: double until a rate fails.
	for !hiFailed {
		if len(res.Steps) >= o.MaxProbes {
			res.Why = fmt.Sprintf("out of probes (%d) before any rate failed", o.MaxProbes)
			return res.settle(), nil
		}
		ok, err := try(hi)
		if err != nil {
			return res.settle(), err
		}
		if !ok {
			break
		}
		if lo = hi; hi*2 > o.MaxRate {
			res.Why = fmt.Sprintf("every rate up to %g requests/s meets the SLO", hi)
			return res.settle(), nil
		}
		hi *= 2
	}
	// Bisect [lo, hi): lo passed, hi failed.
	for (hi-lo)/lo > o.RelTol {
		if len(res.Steps) >= o.MaxProbes {
			res.Why = fmt.Sprintf("out of probes (%d): the goodput lies in [%g, %g) requests/s", o.MaxProbes, lo, hi)
			return res.settle(), nil
		}
		mid := math.Sqrt(lo * hi)
		ok, err := try(mid)
		if err != nil {
			return res.settle(), err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	res.Why = fmt.Sprintf("bracketed within %g: the goodput lies in [%.4g, %.4g) requests/s", o.RelTol, lo, hi)
	return res.settle(), nil
}

// settle derives Goodput and Above from the steps.
func (r Result) settle() Result {
	r.Goodput, r.Above = 0, 0
	for _, s := range r.Steps {
		if s.Pass {
			r.Goodput = max(r.Goodput, s.Rate)
		} else if r.Above == 0 || s.Rate < r.Above {
			r.Above = s.Rate
		}
	}
	return r
}
