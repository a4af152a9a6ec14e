package main

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"

	"github.com/rankrun/rankrun/diag"
)

const analyzeExamples = `  rankrun run --fault exit@gen:1,req=3 --dump-dir dumps; rankrun analyze dumps
  rankrun analyze --json dumps                      # the story as JSON, for tools
  rankrun analyze --trace last.json dumps           # the last moments, for Perfetto
  rankrun analyze /tmp/fr                           # PyTorch flight-recorder dumps (nccl_trace_rank_N)
`

// analyzeCmd reads a job's failure dumps and prints its story.
func analyzeCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("analyze", "Read every rank's failure dump in DIR (rankrun run --dump-dir, or PyTorch NCCL flight-recorder\n"+
		"JSON dumps) and tell the job's story: the ranks with no dump, the first collective the ranks entered\n"+
		"differently and each side's guard values, the ranks that never arrived where others wait and what they\n"+
		"were doing instead, each group's wavefront and the requests still in flight on every rank.", analyzeExamples, stderr)
	jsonOut := fs.Bool("json", false, "print the story as JSON on stdout (stable field names)")
	trace := fs.String("trace", "", "also write the dumps' last moments as a Chrome trace (Perfetto) to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("analyze: want one directory of dumps, got %d arguments", fs.NArg())
	}
	if st, err := os.Stat(fs.Arg(0)); err == nil && !st.IsDir() {
		return usagef("analyze: %s is a file: want the directory of dumps (rankrun run --dump-dir DIR)", fs.Arg(0))
	}
	dumps, unreadable, err := diag.ReadDirSkipping(fs.Arg(0))
	if errors.Is(err, iofs.ErrNotExist) {
		return usageError{err} // a path that is not there is a bad argument (exit 2), as scenario's is
	}
	if err != nil {
		return err
	}
	if *trace != "" {
		if err := writeTraceFile(*trace, dumps); err != nil {
			return err
		}
	}
	s := diag.Analyze(dumps)
	s.Unreadable = unreadable
	if *jsonOut {
		return s.WriteJSON(stdout)
	}
	return s.WriteText(stdout)
}

func writeTraceFile(path string, dumps []*diag.Dump) error {
	f, err := os.Create(path)
	if err != nil {
		return usagef("--trace: %v", err)
	}
	if err := diag.WriteTrace(f, dumps); err != nil {
		f.Close()
		return fmt.Errorf("--trace %s: %w", path, err)
	}
	return f.Close()
}
