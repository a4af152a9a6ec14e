package executor

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// A report's distributions are DDSketches (github.com/DataDog/sketches-go):
// each quantile within SketchAccuracy of the true value, count, sum, min
// and max exact, mergeable across ranks, and bounded in size (at most
// sketchBins bins, which at 1% cover 10^17 ns without collapsing). A rank
// report's size therefore does not grow with the number of iterations or
// requests it measured.
const (
	SketchAccuracy = 0.01
	sketchBins     = 2048
)

var sketchMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(SketchAccuracy)
	if err != nil {
		panic(err) // a constant accuracy in (0, 1)
	}
	return m
}()

func sketchStore() store.Store { return store.NewCollapsingLowestDenseStore(sketchBins) }

// Sketch is a mergeable distribution of durations in nanoseconds. The zero
// value is an empty sketch, ready to use. It marshals to JSON as the
// sketch's compact binary encoding, in base64.
type Sketch struct {
	s *ddsketch.DDSketchWithExactSummaryStatistics
}

func (k *Sketch) init() {
	if k.s == nil {
		k.s = ddsketch.NewDDSketchWithExactSummaryStatistics(sketchMapping, sketchStore)
	}
}

// Add records one duration in nanoseconds.
func (k *Sketch) Add(ns int64) {
	k.init()
	// Every int64 is trackable: the mapping covers far beyond 2^63.
	_ = k.s.Add(float64(ns))
}

// Merge adds every sample of o to k.
func (k *Sketch) Merge(o Sketch) {
	if o.s == nil || o.s.IsEmpty() {
		return
	}
	k.init()
	_ = k.s.MergeWith(o.s) // one mapping for every sketch: cannot fail
}

// N is the number of samples.
func (k Sketch) N() int {
	if k.s == nil {
		return 0
	}
	return int(k.s.GetCount())
}

// Dist summarises the sketch in milliseconds: exact n, mean and max;
// quantiles within SketchAccuracy, clamped to the exact min and max (so a
// distribution of equal samples reports them exactly).
func (k Sketch) Dist() Dist {
	n := k.N()
	if n == 0 {
		return Dist{}
	}
	q, _ := k.s.GetValuesAtQuantiles([]float64{0.50, 0.90, 0.99})
	mx, _ := k.s.GetMaxValue()
	return Dist{N: n, P50: q[0] / 1e6, P90: q[1] / 1e6, P99: q[2] / 1e6, Mean: k.s.GetSum() / float64(n) / 1e6, Max: mx / 1e6}
}

// MarshalJSON encodes the sketch (null when empty).
func (k Sketch) MarshalJSON() ([]byte, error) {
	if k.N() == 0 {
		return []byte("null"), nil
	}
	var b []byte
	k.s.Encode(&b, false)
	return json.Marshal(b)
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (k *Sketch) UnmarshalJSON(data []byte) error {
	k.s = nil
	if string(data) == "null" {
		return nil
	}
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("executor: sketch: %w", err)
	}
	s, err := ddsketch.DecodeDDSketchWithExactSummaryStatistics(b, sketchStore, nil)
	if err != nil {
		return fmt.Errorf("executor: sketch: %w", err)
	}
	if c := s.GetCount(); c < 0 || math.IsNaN(c) {
		return fmt.Errorf("executor: sketch: count %v", c)
	}
	k.s = s
	return nil
}
