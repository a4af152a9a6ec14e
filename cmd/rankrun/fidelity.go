package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/rankrun/rankrun/costmodel"
)

const validateExamples = `  rankrun validate                                  # every published figure, the prediction and the error
  rankrun validate --json                           # the same rows for tools
`

// errValidate is a published row outside its band.
var errValidate = errors.New("validate: published figures outside their band")

// validateRow is one row of rankrun validate --json.
type validateRow struct {
	Name      string  `json:"name"`
	Kind      string  `json:"kind"` // fitted, held out, known gap
	Source    string  `json:"source"`
	Config    string  `json:"config"`
	Unit      string  `json:"unit"`
	Published float64 `json:"published"`
	Predicted float64 `json:"predicted"`
	Error     float64 `json:"error"` // predicted / published - 1
	Lo        float64 `json:"band_lo"`
	Hi        float64 `json:"band_hi"`
	Fitted    string  `json:"fitted,omitempty"`
	Gap       string  `json:"gap,omitempty"`
	OK        bool    `json:"ok"`
}

// validateCmd prints every published figure the cost model knows beside
// its prediction, and fails when one is outside its band.
func validateCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("validate", fmt.Sprintf("Print, for every published measurement the cost model is held against, its source, the configuration,\n"+
		"the published figure, the model's prediction and the error; fitted rows (a constant of the model was\n"+
		"fitted on them), held-out rows and known gaps apart. Exit 1 when a row is outside its band: +-%.0f%% for\n"+
		"fitted and held-out rows, today's ratio for a known gap.", 100*costmodel.Tolerance), validateExamples, stderr)
	jsonOut := fs.Bool("json", false, "print the rows as JSON on stdout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("validate: takes no arguments, got %q", fs.Arg(0))
	}
	var rows []validateRow
	var lines []string
	failed := 0
	for _, r := range costmodel.Published {
		pred, ratio, ok := r.Check()
		if !ok {
			failed++
		}
		lines = append(lines, r.Line(pred, ratio, ok))
		rows = append(rows, validateRow{Name: r.Name, Kind: r.Kind(), Source: r.Source, Config: r.Config, Unit: r.Unit, Published: r.Value,
			Predicted: pred, Error: ratio - 1, Lo: r.Lo, Hi: r.Hi, Fitted: r.Fitted, Gap: r.Gap, OK: ok})
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else {
		var b strings.Builder
		fmt.Fprintf(&b, "%-30s %14s %9s %7s  %-9s %s\n", "row", "published", "model", "error", "kind", "verdict")
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
		b.WriteString("\nsources and configurations:\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "  %s: %s; %s", r.Name, r.Config, r.Source)
			switch {
			case r.Gap != "":
				fmt.Fprintf(&b, "; known gap: %s", r.Gap)
			case r.Fitted != "":
				fmt.Fprintf(&b, "; fitted: %s", r.Fitted)
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "\n%d rows: %d held out, %d fitted, %d known gaps; %d outside their band\n", len(rows), count(rows, "held out"), count(rows, "fitted"), count(rows, "known gap"), failed)
		rms, n := costmodel.HeldOutError(costmodel.Published)
		fmt.Fprintf(&b, "error of the %d rows not fitted on (held out and known gaps): RMS of log(model/published) %.3f\n", n, rms)
		if _, err := io.WriteString(stdout, b.String()); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d rows", errValidate, failed, len(rows))
	}
	return nil
}

func count(rows []validateRow, kind string) int {
	n := 0
	for _, r := range rows {
		if r.Kind == kind {
			n++
		}
	}
	return n
}
