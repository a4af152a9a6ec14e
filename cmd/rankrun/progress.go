package main

import (
	"io"
	"os"

	"github.com/rankrun/rankrun/executor"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// newProgressBar returns a progress bar of n steps (with rate and ETA) on
// stderr when stderr is a terminal, else nil: quiet when piped. A variable
// so that a test can be a terminal.
var newProgressBar = func(what string, n int, stderr io.Writer) *progressbar.ProgressBar {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return progressBarOn(what, n, stderr)
}

func progressBarOn(what string, n int, stderr io.Writer) *progressbar.ProgressBar {
	return progressbar.NewOptions(n, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString(progressUnit[what]),
		progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish(), progressbar.OptionSetRenderBlankState(true))
}

// progressUnit is what each command's bar counts, for its rate.
var progressUnit = map[string]string{"run": "req", "sweep": "run", "explore": "schedule"}

// progressSink counts finished requests on a progress bar (a run on a
// terminal) and hands records and events on to next, when set.
type progressSink struct {
	bar  *progressbar.ProgressBar
	next executor.Sink
}

func (p progressSink) Record(q executor.RequestRecord) {
	_ = p.bar.Add(1)
	if p.next != nil {
		p.next.Record(q)
	}
}

func (p progressSink) Event(ev executor.TraceEvent) {
	if p.next != nil {
		p.next.Event(ev)
	}
}
