// Package runfiles writes a run's output files whole: each through a
// temporary file beside its path and a rename, so that a reader never sees
// half a file, even after an interrupt (WriteFile); and the streams of
// rankrun run's --trace (Chrome trace format) and --requests-out (JSON
// Lines), written as the run goes as its executor.Sink, so that what a
// run holds does not grow with its length (Streams). It is the CLI's: its
// errors name those flags. It does not run anything or print a report.
package runfiles
