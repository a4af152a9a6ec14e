package goodputout

import (
	"encoding/json"
	"io"
	"math"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
)

// Report is rankrun goodput's result (and its JSON).
type Report struct {
	Ctx string `json:"ctx"`
	// Trace is the replayed trace window (trace=FILE...), whose time
	// scale the search varies; omitted under Poisson arrivals.
	Trace       string  `json:"trace,omitempty"`
	RecordedRPS float64 `json:"trace_recorded_rps,omitempty"` // the window's rate at scale 1
	Gen         string  `json:"gen"`
	GPUs        int     `json:"gpus"`
	SLO         string  `json:"slo"`
	Requests    int     `json:"requests_per_probe"`
	Goodput     float64 `json:"goodput_rps"`
	PerGPU      float64 `json:"goodput_per_gpu_rps"`
	Above       float64 `json:"lowest_failing_rps"`
	Why         string  `json:"why"`
	HalfWidth   float64 `json:"attainment_half_width"` // the 95% interval's half width at the SLO share, for this n
	Probes      []Probe `json:"probes"`
}

// Probe is one run of the search: its rate and its attainment.
type Probe struct {
	Rate     float64    `json:"rate_rps"`
	Scale    float64    `json:"trace_scale,omitempty"` // the trace's time scale at this rate
	Met      int        `json:"met"`
	N        int        `json:"n"`
	Share    float64    `json:"attainment"`
	Interval [2]float64 `json:"interval_95"`
	Pass     bool       `json:"pass"`
	Unsure   bool       `json:"unsure"`
}

// New is the report of a search under s: first is its first probe's
// configuration (the pair, its GPUs, the requests a probe), res what
// goodput.Find returned. On a trace, trace is the window replayed (its
// --arrival) and recorded its rate at scale 1; "" and 0 under Poisson
// arrivals.
func New(first *executor.Config, s goodput.SLO, res goodput.Result, trace string, recorded float64) Report {
	out := Report{Ctx: first.Ctx.String(), Gen: first.Gen.String(), GPUs: first.Ranks(), SLO: s.String(), Requests: first.Workload.Requests,
		Goodput: res.Goodput, Above: res.Above, Why: res.Why, RecordedRPS: recorded, Trace: trace}
	out.PerGPU = res.Goodput / float64(out.GPUs)
	lo, hi := goodput.Attainment{Met: int(math.Round(s.Share * float64(out.Requests))), N: out.Requests}.Interval(goodput.Z95)
	out.HalfWidth = (hi - lo) / 2
	for _, st := range res.Steps {
		l, h := st.Att.Interval(goodput.Z95)
		scale := 0.0
		if recorded > 0 {
			scale = st.Rate / recorded
		}
		out.Probes = append(out.Probes, Probe{Rate: st.Rate, Scale: scale, Met: st.Att.Met, N: st.Att.N, Share: st.Att.Share(), Interval: [2]float64{l, h}, Pass: st.Pass, Unsure: st.Unsure})
	}
	return out
}

// JSON writes the report as indented JSON, one line break at its end.
func (g Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(g)
}
