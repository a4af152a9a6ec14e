package sweepout

import (
	"encoding/json"
	"os"

	"github.com/rankrun/rankrun/executor"
)

// JSON writes every run's report (each repeat's), in order, to path: one
// indented JSON array.
func (sw Sweep) JSON(path string) error {
	var reps []*executor.Report
	for _, r := range sw.Cells {
		reps = append(reps, r.Reports...)
	}
	b, err := json.MarshalIndent(reps, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
