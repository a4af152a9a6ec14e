package sweepout

import (
	"encoding/csv"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/sweep"
)

var csvHeader = []string{"ctx", "gen", "arrival", "requests_completed", "requests_failed", "requests_cancelled",
	"throughput_rps", "ttft_p50_ms", "ttft_p99_ms", "idle_handover_p50_ms", "idle_handover_p99_ms",
	"peak_kv_util_ctx", "peak_kv_util_gen", "bytes_verified", "leaked_blocks", "pinned_blocks_at_end", "duration_s", "error",
	"status", "repeat", "gpus", "throughput_per_gpu_rps", "tpot_p50_ms", "slo_attainment", "goodput_rps", "goodput_per_gpu_rps"}

// CSVHeader is the CSV's first row, its column names.
func CSVHeader() []string { return slices.Clone(csvHeader) }

// CSV writes one row per run (each repeat its own row) to path; the
// goodput columns are the pair's.
func (sw Sweep) CSV(path string) error {
	var b strings.Builder
	cw := csv.NewWriter(&b)
	_ = cw.Write(csvHeader)
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	opt := func(d executor.Dist, v float64) string {
		if d.N == 0 {
			return ""
		}
		return num(v)
	}
	gp := map[string]sweep.PairGoodput{}
	for _, g := range sw.goodputs() {
		gp[g.Pair] = g
	}
	for _, r := range sw.Cells {
		for i, rep := range r.Reports {
			ctx, gen := instanceUtil(rep)
			st, g := r.Stats[i], gp[r.Pair.String()]
			ok := "ok"
			if r.FailedAt(i) {
				ok = "failed"
			}
			goodRate, goodPer := "", ""
			if _, has := gp[r.Pair.String()]; has {
				goodRate, goodPer = num(g.Rate), num(g.PerGPU)
			}
			_ = cw.Write([]string{rep.Ctx, rep.Gen, r.Arrival, strconv.Itoa(rep.RequestsCompleted), strconv.Itoa(rep.RequestsFailed),
				strconv.Itoa(rep.RequestsCancelled), num(rep.ThroughputRPS), opt(rep.TTFTMs, rep.TTFTMs.P50), opt(rep.TTFTMs, rep.TTFTMs.P99),
				opt(rep.IdleHandoverMs, rep.IdleHandoverMs.P50), opt(rep.IdleHandoverMs, rep.IdleHandoverMs.P99), num(ctx), num(gen),
				strconv.FormatInt(rep.BytesVerified, 10), strconv.Itoa(rep.LeakedBlocks), strconv.Itoa(rep.PinnedBlocksAtEnd),
				num(rep.DurationS), strings.Join(rep.Errors, "; "),
				ok, strconv.Itoa(i + 1), strconv.Itoa(r.GPUs()), num(st.TputPerGPU), num(st.TPOTP50), num(st.Attain), goodRate, goodPer})
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
