package goodputout

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/goodput"
	"github.com/rankrun/rankrun/topology"
)

var (
	slo   = goodput.SLO{TTFT: 500 * time.Millisecond, TPOT: 50 * time.Millisecond, Share: 0.9}
	first = executor.Config{Ctx: topology.MustParseLayout("tp=1"), Gen: topology.MustParseLayout("tp=2"),
		Workload: executor.Workload{Requests: 60}}
	res = goodput.Result{Goodput: 8, Above: 10, Why: "bracketed", Steps: []goodput.Step{
		{Rate: 4, Att: goodput.Attainment{Met: 60, N: 60}, Pass: true},
		{Rate: 16, Att: goodput.Attainment{Met: 30, N: 60}},
		{Rate: 8, Att: goodput.Attainment{Met: 55, N: 60}, Pass: true, Unsure: true},
		{Rate: 10, Att: goodput.Attainment{Met: 50, N: 60}},
	}}
)

// A report states the pair, its GPUs and the SLO; goodput per GPU; each
// probe's attainment with its interval; and the interval's half width at
// the SLO's share for a probe's requests.
func TestNew(t *testing.T) {
	r := New(&first, slo, res, "", 0)
	assert.Equal(t, "tp=1", r.Ctx)
	assert.Equal(t, "tp=2", r.Gen)
	assert.Equal(t, 3, r.GPUs)
	assert.Equal(t, slo.String(), r.SLO)
	assert.Equal(t, 60, r.Requests)
	assert.InDelta(t, 8.0/3, r.PerGPU, 1e-12)
	lo, hi := goodput.Attainment{Met: 54, N: 60}.Interval(goodput.Z95)
	assert.InDelta(t, (hi-lo)/2, r.HalfWidth, 1e-12)
	require.Len(t, r.Probes, 4)
	for i, p := range r.Probes {
		st := res.Steps[i]
		l, h := st.Att.Interval(goodput.Z95)
		assert.Equal(t, Probe{Rate: st.Rate, Met: st.Att.Met, N: st.Att.N, Share: st.Att.Share(), Interval: [2]float64{l, h}, Pass: st.Pass, Unsure: st.Unsure}, p)
	}
	// Under Poisson arrivals the JSON has no trace fields.
	var b bytes.Buffer
	require.NoError(t, r.JSON(&b))
	var m map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &m))
	for _, k := range []string{"trace", "trace_recorded_rps"} {
		assert.NotContains(t, m, k)
	}
	assert.NotContains(t, b.String(), "trace_scale")

	// On a trace: each probe's time scale, and the trace's fields.
	r = New(&first, slo, res, "trace=t.csv", 4)
	assert.Equal(t, "trace=t.csv", r.Trace)
	assert.InDelta(t, 4.0, r.Probes[1].Scale, 1e-12)
	b.Reset()
	require.NoError(t, r.JSON(&b))
	assert.Contains(t, b.String(), `"trace_scale": 4`)
	var back Report
	require.NoError(t, json.Unmarshal(b.Bytes(), &back))
	assert.Equal(t, r, back, "the JSON holds the whole report")
}

// The text: the setting, one row per probe in the order run with its
// verdict, the goodput, and the confidence.
func TestText(t *testing.T) {
	var b bytes.Buffer
	New(&first, slo, res, "", 0).Text(&b, slo)
	assert.Equal(t, `goodput of ctx tp=1 -> gen tp=2 (3 GPUs): >= 90% of requests within TTFT 500ms and TPOT 50ms, Poisson arrivals, 60 requests a probe

  probe  rate rps    met  attainment  95% interval         verdict
      1         4  60/60      100.0%   94.0-100.0%           meets
      2        16  30/60       50.0%    37.7-62.3%           fails
      3         8  55/60       91.7%    81.9-96.4%  meets (unsure)
      4        10  50/60       83.3%    72.0-90.7%           fails

goodput: 8 requests/s (2.667 per GPU); bracketed
confidence: with 60 requests a probe, an attainment of 90% has a 95% interval of +-7.7%; +-2% needs 865 (--requests)
`, b.String())

	b.Reset()
	New(&first, slo, res, "trace=t.csv", 4).Text(&b, slo)
	assert.Contains(t, b.String(), "trace=t.csv replayed at a time scale the search sets (scale 1: its recorded 4 requests/s), 60 requests a probe\n")
	assert.Contains(t, b.String(), "\n  probe  rate rps  scale    met  attainment")
	assert.Contains(t, b.String(), "\n      2        16      4  30/60")
	assert.Contains(t, b.String(), "\non the trace: time scale 2 (its arrivals at 2 x the recorded rate)\n")
}
