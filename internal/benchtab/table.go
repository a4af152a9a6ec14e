// The table: its rows in order, what could not be measured, and how it
// prints on a terminal.

package benchtab

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// table is what a run of the bench measured; its JSON is --json's file.
type table struct {
	Machine machine  `json:"machine"`
	Rows    []Row    `json:"rows"`
	Missing []string `json:"missing,omitempty"`
}

func (t *table) add(r Row) { t.Rows = append(t.Rows, r) }

// missingTo returns the missing callback of the row producers: what could
// not be measured, and why, is kept in the table and said on stderr now.
func (t *table) missingTo(stderr io.Writer) func(string, error) {
	return func(what string, err error) {
		t.Missing = append(t.Missing, fmt.Sprintf("%s: %v", what, err))
		fmt.Fprintf(stderr, "rankrun bench: %s missing: %v\n", what, err)
	}
}

func fmtVal(v float64) string {
	switch a := math.Abs(v); {
	case v == 0:
		return "0"
	case a >= 1e5:
		return fmt.Sprintf("%.3g", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.4f", v)
	}
}

func metStr(m *bool) string {
	switch {
	case m == nil:
		return ""
	case *m:
		return "yes"
	default:
		return "NO"
	}
}

func ratioStr(r Row) string {
	if r.RefValue == 0 && r.Ratio == 0 {
		return "-"
	}
	if math.Abs(r.Ratio) < 0.1 && r.Ratio != 0 {
		return fmt.Sprintf("%.2gx", r.Ratio)
	}
	return fmt.Sprintf("%.2fx", r.Ratio)
}

// printTable writes the table for a terminal: a block of aligned columns
// a section, then the goals met and what is missing.
func printTable(w io.Writer, out table) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	sec := ""
	for _, r := range out.Rows {
		if r.Section != sec {
			sec = r.Section
			fmt.Fprintf(tw, "\n== %s\n", sec)
			fmt.Fprintf(tw, "figure\tvalue\tunit\treference\tref\tratio\tgoal\tmet\tallocs/op\tnote\n")
		}
		allocs := ""
		if r.Allocs != nil {
			allocs = fmtVal(*r.Allocs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Figure, fmtVal(r.Value), r.Unit, r.Reference, fmtVal(r.RefValue),
			ratioStr(r), r.Goal, metStr(r.Met), allocs, r.Note)
	}
	tw.Flush()
	met, total := 0, 0
	for _, r := range out.Rows {
		if r.Met != nil {
			total++
			if *r.Met {
				met++
			}
		}
	}
	fmt.Fprintf(w, "\ngoals met: %d of %d\n", met, total)
	for _, m := range out.Missing {
		fmt.Fprintf(w, "missing: %s\n", m)
	}
}
