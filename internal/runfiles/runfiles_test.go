package runfiles

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
)

// A file is written whole or not at all: a failed write leaves neither
// the file nor its temporary, and names the flag; a good one is there.
func TestWriteFileWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.csv")
	err := WriteFile("--csv", path, func(w io.Writer) error {
		_, _ = io.WriteString(w, "half")
		return errors.New("disk full")
	})
	require.ErrorContains(t, err, "--csv "+path+": disk full")
	left, _ := os.ReadDir(dir)
	assert.Empty(t, left, "no file and no temporary after a failed write")

	require.NoError(t, WriteFile("--csv", path, func(w io.Writer) error { _, err := io.WriteString(w, "a,b\n"); return err }))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "a,b\n", string(b))
	left, _ = os.ReadDir(dir)
	assert.Len(t, left, 1, "the file only")
}

// ProbeWritable leaves no file that was not there before.
func TestProbeWritableLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, ProbeWritable(filepath.Join(dir, "new.json")))
	left, _ := os.ReadDir(dir)
	assert.Empty(t, left)
	require.ErrorContains(t, ProbeWritable(dir), "is a directory")
	require.Error(t, ProbeWritable(filepath.Join(dir, "no", "such", "dir.json")))
}

// The streams write every record as a line of JSON and every event into
// one Chrome trace, with each rank's track named, only at Finish; before
// it, and after Discard, the paths hold nothing.
func TestStreams(t *testing.T) {
	dir := t.TempDir()
	trace, reqs := filepath.Join(dir, "t.json"), filepath.Join(dir, "r.jsonl")
	ss, err := Open(trace, reqs)
	require.NoError(t, err)
	ss.Record(executor.RequestRecord{ID: 1, Tokens: 10})
	ss.Event(executor.TraceEvent{Name: "prefill", Ph: "X", TS: 1, Dur: 2})
	_, err = os.Stat(trace)
	require.ErrorIs(t, err, os.ErrNotExist, "no file at its path before Finish")
	rep := &executor.Report{Ctx: "tp=1", Gen: "tp=2", Requests: []executor.RequestRecord{{ID: 2, Tokens: 20}},
		Ranks_: []executor.RankReport{{Role: "gen", Rank: 1, WorldRank: 2, Trace: []executor.TraceEvent{{Name: "decode", Ph: "X"}}}}}
	require.NoError(t, ss.Finish(rep))
	assert.Nil(t, rep.Ranks_[0].Trace, "the report carries no events after Finish")

	b, err := os.ReadFile(reqs)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 2, "the streamed record and the one the report held")
	for i, l := range lines {
		var q executor.RequestRecord
		require.NoError(t, json.Unmarshal([]byte(l), &q))
		assert.EqualValues(t, i+1, q.ID)
	}
	b, err = os.ReadFile(trace)
	require.NoError(t, err)
	var tr struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(b, &tr), "the trace is one JSON document")
	var names []string
	for _, ev := range tr.TraceEvents {
		names = append(names, ev["name"].(string))
	}
	assert.Equal(t, []string{"prefill", "process_name", "thread_name", "decode"}, names)
	ss.Event(executor.TraceEvent{Name: "late"}) // after Finish: dropped, the file stays whole
	b2, _ := os.ReadFile(trace)
	assert.Equal(t, string(b), string(b2))

	other := filepath.Join(dir, "other.json")
	ss, err = Open(other, "")
	require.NoError(t, err)
	ss.Event(executor.TraceEvent{Name: "x"})
	ss.Discard()
	_, err = os.Stat(other)
	require.ErrorIs(t, err, os.ErrNotExist)
	left, _ := os.ReadDir(dir)
	assert.Len(t, left, 2, "no temporary left by Discard")
	none, err := Open("", "")
	require.NoError(t, err)
	assert.Nil(t, none, "nothing asked for: no streams")
}
