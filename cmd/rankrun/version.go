package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/rankrun/rankrun/executor"
)

// versionLine is `rankrun version`: the module version, the commit and
// its time (with "+dirty" for a modified tree) and the Go toolchain, from
// what the build recorded.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "rankrun (no build information)"
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	line := "rankrun " + bi.Main.Version
	if rev != "" && !strings.Contains(bi.Main.Version, rev[:min(12, len(rev))]) {
		line += " commit " + rev[:min(12, len(rev))]
		if dirty {
			line += "+dirty"
		}
		if at != "" {
			line += " (" + at + ")"
		}
	}
	return line + " " + bi.GoVersion
}

// jsonUsageError prints, when the command line set --json, a refused
// command line as the report's error object on stdout (kind "usage"), so
// that a tool reading the JSON sees every failure; the line on stderr
// stays.
func jsonUsageError(err error, jsonOut bool, stdout io.Writer) {
	var ue usageError
	if !jsonOut || !errors.As(err, &ue) || quietRank() {
		return
	}
	b, merr := json.MarshalIndent(struct {
		Error executor.RunError `json:"error"`
	}{executor.RunError{Kind: "usage", Message: ue.Error(), Ranks: []int{}}}, "", "  ")
	if merr == nil {
		fmt.Fprintf(stdout, "%s\n", b)
	}
}
