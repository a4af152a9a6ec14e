package goodput_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/goodput"
)

var slo = goodput.SLO{TTFT: time.Second, TPOT: 50 * time.Millisecond, Share: 0.9}

// cliff is a system whose every request meets the SLO up to rate g and
// none past it, measured on n requests; it counts its probes.
func cliff(g float64, n int, probes *int) goodput.Probe {
	return func(_ context.Context, rate float64) (goodput.Attainment, error) {
		*probes++
		if rate <= g {
			return goodput.Attainment{Met: n, N: n}, nil
		}
		return goodput.Attainment{Met: 0, N: n}, nil
	}
}

func TestFindBracketsTheGoodput(t *testing.T) {
	for _, c := range []struct {
		name   string
		g      float64
		lo, hi float64
		probes int // the search's exact path length (virtual: the same everywhere)
	}{
		{"inside the first bracket", 13.7, 10, 20, 8},
		{"above it: hi doubles", 137, 10, 20, 11},
		{"below it: lo halves", 0.9, 10, 20, 11},
		{"exactly at lo", 10, 10, 20, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			probes := 0
			res, err := goodput.Find(context.Background(), slo, cliff(c.g, 1000, &probes), goodput.Options{Lo: c.lo, Hi: c.hi, RelTol: 0.02})
			require.NoError(t, err)
			assert.Contains(t, res.Why, "bracketed within 0.02")
			assert.LessOrEqual(t, res.Goodput, c.g, "a rate that passed")
			assert.Greater(t, res.Above, c.g, "a rate that failed")
			assert.LessOrEqual(t, (res.Above-res.Goodput)/res.Goodput, 0.02+1e-12, "to the tolerance")
			assert.Equal(t, len(res.Steps), probes, "every probe is a step")
			for _, s := range res.Steps {
				assert.Equal(t, s.Rate <= c.g, s.Pass, "rate %g", s.Rate)
				assert.False(t, s.Unsure, "1000 of 1000 or 0 of 1000 is far from 90%%")
			}
			assert.Equal(t, c.probes, probes, "a bisection of the narrowest bracket found, not a scan")
		})
	}
}

func TestFindEnds(t *testing.T) {
	probes := 0
	res, err := goodput.Find(context.Background(), slo, cliff(1e9, 100, &probes), goodput.Options{Lo: 1, Hi: 2, MaxRate: 40})
	require.NoError(t, err)
	assert.Equal(t, "every rate up to 32 requests/s meets the SLO", res.Why)
	assert.Equal(t, 32.0, res.Goodput)
	assert.Zero(t, res.Above)

	res, err = goodput.Find(context.Background(), slo, cliff(0, 100, &probes), goodput.Options{Lo: 1, Hi: 2, MinRate: 0.2})
	require.NoError(t, err)
	assert.Equal(t, "no rate down to 0.25 requests/s meets the SLO", res.Why)
	assert.Zero(t, res.Goodput)
	assert.Equal(t, 0.25, res.Above)

	probes = 0
	res, err = goodput.Find(context.Background(), slo, cliff(5, 100, &probes), goodput.Options{Lo: 1, Hi: 2, MaxProbes: 4})
	require.NoError(t, err)
	assert.Equal(t, 4, probes)
	assert.Contains(t, res.Why, "out of probes (4)")
	assert.Equal(t, 4.0, res.Goodput)
	assert.Equal(t, 8.0, res.Above)
}

// The search never probes above a rate that failed: a failure window
// below the goodput is found only if a probe lands in it, and then it
// caps the goodput.
func TestFindNeverProbesAboveAFailure(t *testing.T) {
	var rates []float64
	probe := func(_ context.Context, rate float64) (goodput.Attainment, error) {
		rates = append(rates, rate)
		if rate > 3 && rate < 5 || rate > 20 {
			return goodput.Attainment{Met: 0, N: 10}, nil
		}
		return goodput.Attainment{Met: 10, N: 10}, nil
	}
	res, err := goodput.Find(context.Background(), slo, probe, goodput.Options{Lo: 1, Hi: 4})
	require.NoError(t, err)
	assert.Less(t, res.Goodput, 3.0+1e-9, "the window at 4 caps it")
	lowestFail := math.Inf(1)
	for _, s := range res.Steps {
		if !s.Pass {
			lowestFail = min(lowestFail, s.Rate)
		} else {
			assert.Less(t, s.Rate, lowestFail, "a pass probed after a lower failure")
		}
	}
	assert.Equal(t, lowestFail, res.Above)
	assert.Len(t, rates, len(res.Steps))
}

func TestFindErrors(t *testing.T) {
	boom := errors.New("boom")
	_, err := goodput.Find(context.Background(), slo, func(context.Context, float64) (goodput.Attainment, error) {
		return goodput.Attainment{}, boom
	}, goodput.Options{Lo: 1, Hi: 2})
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "the probe at 1 requests/s")
	for _, c := range []struct {
		slo  goodput.SLO
		o    goodput.Options
		want string
	}{
		{slo, goodput.Options{Lo: 0, Hi: 2}, "want 0 < lo < hi"},
		{slo, goodput.Options{Lo: 3, Hi: 2}, "want 0 < lo < hi"},
		{slo, goodput.Options{Lo: 1, Hi: 2, RelTol: 1.5}, "relative tolerance 1.5"},
		{slo, goodput.Options{Lo: 1, Hi: 2, MaxProbes: 1}, "max probes 1"},
		{slo, goodput.Options{Lo: 1, Hi: 2, MaxRate: 1.5}, "max rate 1.5: must be at least hi = 2"},
		{slo, goodput.Options{Lo: 1, Hi: 2, MinRate: 2}, "min rate 2: must be in (0, lo = 1]"},
		{goodput.SLO{TTFT: 0, TPOT: 1, Share: 0.9}, goodput.Options{Lo: 1, Hi: 2}, "SLO TTFT = 0s"},
		{goodput.SLO{TTFT: 1, TPOT: 0, Share: 0.9}, goodput.Options{Lo: 1, Hi: 2}, "SLO TPOT = 0s"},
		{goodput.SLO{TTFT: 1, TPOT: 1, Share: 1.2}, goodput.Options{Lo: 1, Hi: 2}, "SLO share = 1.2"},
		{goodput.SLO{TTFT: 1, TPOT: 1, Share: math.NaN()}, goodput.Options{Lo: 1, Hi: 2}, "SLO share = NaN"},
	} {
		_, err := goodput.Find(context.Background(), c.slo, cliff(1, 1, new(int)), c.o)
		assert.ErrorContains(t, err, c.want)
	}
}

// The Wilson interval against published values, and the sample sizes the
// package documents.
func TestIntervalAndRequestsFor(t *testing.T) {
	lo, hi := goodput.Attainment{Met: 90, N: 100}.Interval(goodput.Z95)
	assert.InDelta(t, 0.8256, lo, 1e-4)
	assert.InDelta(t, 0.9448, hi, 1e-4)
	lo, hi = goodput.Attainment{Met: 100, N: 100}.Interval(goodput.Z95)
	assert.InDelta(t, 0.9630, lo, 1e-4, "all met: the interval still has room below")
	assert.Equal(t, 1.0, hi)
	lo, hi = goodput.Attainment{Met: 0, N: 100}.Interval(goodput.Z95)
	assert.Equal(t, 0.0, lo)
	assert.InDelta(t, 0.0370, hi, 1e-4)
	lo, hi = goodput.Attainment{}.Interval(goodput.Z95)
	assert.Equal(t, [2]float64{0, 1}, [2]float64{lo, hi})
	assert.Equal(t, 865, goodput.RequestsFor(0.9, 0.02, goodput.Z95))
	assert.Equal(t, 139, goodput.RequestsFor(0.9, 0.05, goodput.Z95))
	assert.Equal(t, 1900, goodput.RequestsFor(0.95, 0.01, 2), "an exact n is not rounded up")
	assert.Equal(t, 396, goodput.RequestsFor(0.99, 0.01, 2))
	assert.Equal(t, 0, goodput.RequestsFor(1, 0.01, 2), "no noise at a share of 1")
	assert.Equal(t, math.MaxInt, goodput.RequestsFor(0.9, 0, 2))
	// At the size RequestsFor gives, the interval at the share is that narrow.
	n := goodput.RequestsFor(0.9, 0.02, goodput.Z95)
	lo, hi = goodput.Attainment{Met: int(0.9 * float64(n)), N: n}.Interval(goodput.Z95)
	assert.InDelta(t, 0.04, hi-lo, 0.002)
}

// A probe whose interval holds the target is marked unsure, whichever way
// its point estimate fell.
func TestUnsureProbes(t *testing.T) {
	probe := func(_ context.Context, rate float64) (goodput.Attainment, error) {
		if rate < 2 {
			return goodput.Attainment{Met: 19, N: 20}, nil // 95%: passes, interval [0.76, 0.99]
		}
		return goodput.Attainment{Met: 17, N: 20}, nil // 85%: fails, interval [0.64, 0.95]
	}
	res, err := goodput.Find(context.Background(), slo, probe, goodput.Options{Lo: 1, Hi: 2, RelTol: 0.5})
	require.NoError(t, err)
	require.Len(t, res.Steps, 3) // 1, 2, then sqrt(2) (the bracket [1, 2) is wider than 0.5)
	assert.True(t, res.Steps[0].Pass && res.Steps[0].Unsure)
	assert.True(t, !res.Steps[1].Pass && res.Steps[1].Unsure)
	assert.True(t, res.Steps[2].Pass && res.Steps[2].Unsure)
	assert.Equal(t, math.Sqrt2, res.Goodput)
}

// The target share itself passes (at least, not more than), and a full
// attainment against a target of 1 is sure.
func TestShareBoundary(t *testing.T) {
	probe := func(_ context.Context, rate float64) (goodput.Attainment, error) {
		if rate < 2 {
			return goodput.Attainment{Met: 90, N: 100}, nil
		}
		return goodput.Attainment{Met: 89, N: 100}, nil
	}
	res, err := goodput.Find(context.Background(), slo, probe, goodput.Options{Lo: 1, Hi: 2, RelTol: 0.99, MaxProbes: 2})
	require.NoError(t, err)
	require.Len(t, res.Steps, 2)
	assert.True(t, res.Steps[0].Pass, "90 of 100 meets 90%%")
	assert.False(t, res.Steps[1].Pass, "89 of 100 does not")
	all := goodput.SLO{TTFT: 1, TPOT: 1, Share: 1}
	res, err = goodput.Find(context.Background(), all, cliff(1.5, 100, new(int)), goodput.Options{Lo: 1, Hi: 2, RelTol: 0.99})
	require.NoError(t, err)
	assert.True(t, res.Steps[0].Pass)
	assert.True(t, res.Steps[0].Unsure, "100 of 100 cannot rule out a true share below 1")
}

// A probe that fails (an interrupt) ends the search with the probes that
// finished, settled.
func TestFindKeepsFinishedProbes(t *testing.T) {
	stop := errors.New("interrupted")
	n := 0
	probe := func(_ context.Context, rate float64) (goodput.Attainment, error) {
		if n++; n == 4 {
			return goodput.Attainment{}, stop
		}
		return cliff(3, 10, new(int))(context.Background(), rate)
	}
	res, err := goodput.Find(context.Background(), slo, probe, goodput.Options{Lo: 1, Hi: 2})
	require.ErrorIs(t, err, stop)
	require.Len(t, res.Steps, 3) // 1, 2 pass; 4 fails; the fourth was cut
	assert.Equal(t, 2.0, res.Goodput)
	assert.Equal(t, 4.0, res.Above)
}
