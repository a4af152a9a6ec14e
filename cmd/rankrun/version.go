package main

import (
	"runtime/debug"
	"strings"
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
