package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/rankrun/rankrun/internal/runfiles"
	"github.com/rankrun/rankrun/internal/sweepout"
)

// checkSweepOutputs checks every output path before anything runs: each can
// be written, none is given twice, and the plot's extension is known.
func checkSweepOutputs(csvPath, jsonPath, plotPath string) error {
	seen := map[string]string{}
	for _, o := range []struct{ flag, path string }{{"--csv", csvPath}, {"--json", jsonPath}, {"--plot", plotPath}} {
		if o.path == "" {
			continue
		}
		if o.flag == "--plot" {
			if ext := strings.ToLower(filepath.Ext(o.path)); ext != ".svg" && ext != ".png" {
				return usagef("--plot %s: the file name must end in .svg or .png", o.path)
			}
		}
		abs, err := filepath.Abs(o.path)
		if err != nil {
			abs = o.path
		}
		if prev, ok := seen[abs]; ok {
			return usagef("%s %s: the same file as %s", o.flag, o.path, prev)
		}
		seen[abs] = o.flag
		if err := runfiles.ProbeWritable(o.path); err != nil {
			return usagef("%s: %v", o.flag, err)
		}
	}
	return nil
}

// finishSweep prints the sweep's table (sweepout), writes the outputs
// asked for, and fails the sweep when any run failed.
func finishSweep(sw sweepout.Sweep, stdout io.Writer, csvOut, jsonOut, plotOut string) error {
	if err := sw.Table(stdout); err != nil {
		return err
	}
	var errs []error
	for _, o := range []struct {
		flag, path string
		write      func(string) error
	}{{"--csv", csvOut, sw.CSV}, {"--json", jsonOut, sw.JSON}, {"--plot", plotOut, sw.Plot}} {
		if o.path == "" {
			continue
		}
		if err := o.write(o.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.flag, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	bad, total := 0, 0
	for _, r := range sw.Cells {
		for i := range r.Reports {
			total++
			if r.FailedAt(i) {
				bad++
			}
		}
	}
	if bad > 0 {
		return exitError{code: 1, msg: fmt.Sprintf("sweep: %d of %d runs failed or leaked KV blocks (see the error lines)", bad, total)}
	}
	return nil
}
