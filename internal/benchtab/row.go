// A row of the table: one figure beside its reference, and its goal.

package benchtab

import (
	"fmt"
	"strings"
)

// Row is one figure next to its reference. Ratio is Value/RefValue
// unless the row says otherwise (Note).
type Row struct {
	Section   string   `json:"section"`
	Figure    string   `json:"figure"`
	Value     float64  `json:"value"`
	Unit      string   `json:"unit"`
	Reference string   `json:"reference"`
	RefValue  float64  `json:"reference_value"`
	Ratio     float64  `json:"ratio"`
	Goal      string   `json:"goal,omitempty"`
	Met       *bool    `json:"meets_goal,omitempty"`
	Allocs    *float64 `json:"allocs_per_op,omitempty"`
	Note      string   `json:"note,omitempty"`
}

// RatioRow fills Ratio and Met: lower is better for "<=" goals, higher for
// ">=" goals.
func RatioRow(r Row) Row {
	if r.RefValue != 0 {
		r.Ratio = r.Value / r.RefValue
	}
	var lim float64
	switch {
	case strings.HasPrefix(r.Goal, "<="):
		if _, err := fmt.Sscanf(r.Goal, "<=%g", &lim); err == nil && r.RefValue != 0 {
			r.Met = ptr(r.Ratio <= lim)
		}
	case strings.HasPrefix(r.Goal, ">="):
		if _, err := fmt.Sscanf(r.Goal, ">=%g", &lim); err == nil && r.RefValue != 0 {
			r.Met = ptr(r.Ratio >= lim)
		}
	}
	return r
}

func ptr[T any](v T) *T { return &v }

// FirstLine is how a process's error output reads in a note or a missing
// line: its first line, cut at 160 bytes.
func FirstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
