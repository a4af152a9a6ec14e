package benchtab

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The table read from a raw folder of every kind of file scripts/bench.sh
// writes, with a caller's rows of every form a value, ratio and goal
// takes: the terminal table, the stderr lines, the JSON and BENCHMARKS.md
// (kept text around the markers, and a new file) are byte for byte the
// golden files, written by the code as it was in package main before the
// table moved here.
func TestOutputsGolden(t *testing.T) {
	raw := filepath.Join("testdata", "raw")
	m := machineInfo(raw, "make bench")
	require.Equal(t, "mpirun (Open MPI) 4.1.4", m.OpenMPI, "Open MPI's version is read from the raw folder")
	m.CPUs, m.CPUModel, m.MemoryGiB, m.Go, m.OS, m.Date = 2, "AMD EPYC", "23.5 GiB", "go1.26.8", "linux/amd64", "2026-12-07 01:03 UTC"
	out := &table{Machine: m}
	var stdout, stderr bytes.Buffer
	missing := out.missingTo(&stderr)
	rawRows(raw, out.add, missing)
	caller := func(add func(Row), missing func(string, error)) {
		sec := "a caller's rows"
		add(RatioRow(Row{Section: sec, Figure: "zero", Value: 0, Unit: "x", Reference: "none"}))
		add(RatioRow(Row{Section: sec, Figure: "large, tiny ratio, met", Value: 123456, Unit: "ns/op", Reference: "ref", RefValue: 1.5e7, Goal: "<=0.5"}))
		add(RatioRow(Row{Section: sec, Figure: "negative, not met", Value: -2.5, Unit: "%", Reference: "ref", RefValue: 0.25, Goal: ">=1", Note: "a note"}))
		add(RatioRow(Row{Section: sec, Figure: "  indented, small", Value: 0.000123, Unit: "ms", Reference: "ref", RefValue: 0.5, Allocs: ptr(0.25)}))
		add(RatioRow(Row{Section: sec, Figure: "a goal in words", Value: 150, Unit: "ms", Reference: "ref", RefValue: 100, Goal: "p99 < 1 ms"}))
		missing("perf-regression figures", errors.New("open x: no such file"))
	}
	caller(out.add, missing)

	dir := t.TempDir()
	o := Options{Raw: raw, JSON: filepath.Join(dir, "bench.json"), Markdown: filepath.Join(dir, "BENCHMARKS.md")}
	before, err := os.ReadFile(filepath.Join("testdata", "BENCHMARKS.before.md"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(o.Markdown, before, 0o644))
	require.NoError(t, writeOutputs(&stdout, o, *out))
	golden := func(name string, got []byte) {
		t.Helper()
		want, err := os.ReadFile(filepath.Join("testdata", "golden."+name))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), name)
	}
	golden("stdout.txt", stdout.Bytes())
	golden("stderr.txt", stderr.Bytes())
	for _, f := range []string{"bench.json", "BENCHMARKS.md"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		golden(f, b)
	}

	// A new BENCHMARKS.md gets the standard head; no raw folder, no profile.
	fresh := filepath.Join(dir, "fresh.md")
	require.NoError(t, writeMarkdown(fresh, "", table{Machine: m, Rows: out.Rows[len(out.Rows)-5:]}))
	b, err := os.ReadFile(fresh)
	require.NoError(t, err)
	golden("fresh.md", b)
}

// A raw folder with nothing in it: every part is missing, each named.
func TestRawRowsMissing(t *testing.T) {
	var rows []Row
	var what []string
	rawRows(t.TempDir(), func(r Row) { rows = append(rows, r) }, func(w string, err error) {
		require.Error(t, err)
		what = append(what, w)
	})
	require.Empty(t, rows)
	require.Equal(t, []string{"collectives", "transceiver", "status check under mpirun", "KV transfer under mpirun", "gpu pool", "cost model finite run"}, what)
}

func TestFirstLine(t *testing.T) {
	require.Equal(t, "one", FirstLine("one\ntwo"))
	long := string(bytes.Repeat([]byte("x"), 200))
	require.Equal(t, long[:160]+"...", FirstLine(long))
}
