// Package sweepout renders a finished rankrun sweep, byte for byte as
// rankrun sweep prints and writes it: the table of cells with each pair's
// goodput per GPU and the best placement (Table), one CSV row per run
// (CSV), every run's report as a JSON array (JSON), and the plot, per
// pair or against the rate, as SVG or PNG (Plot).
//
// It owns the outputs' layout and wording, which name rankrun's flags
// where they hint at one (--csv, --slo-*): it is the CLI's, not a user's
// (a Go user of sweep.Run has the figures in sweep.Cell, sweep.Goodputs
// and sweep.Ranked). It does not know the command line: it parses no
// flag, checks no output path before the run, names no flag in its errors
// and decides no exit code; the compute model's description is the
// caller's (Title takes it as a function). What a cell measured and how
// pairs rank is package sweep's.
package sweepout
