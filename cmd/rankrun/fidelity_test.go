package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/costmodel"
)

// rankrun validate prints every published row with its source, its
// prediction and its kind, and exits 0 while every row is in its band.
func TestValidatePrintsEveryRow(t *testing.T) {
	withoutRace(t, "test-perf")
	code, out, errOut := cli(t, "validate")
	require.Equal(t, 0, code, errOut)
	for _, r := range costmodel.Published {
		assert.Contains(t, out, r.Name+": "+r.Config+"; "+r.Source)
		line := r.String()
		assert.Contains(t, out, line+"\n")
		assert.True(t, strings.HasSuffix(line, " ok"), line)
	}
	assert.Contains(t, out, "held out")
	assert.Contains(t, out, " 0 outside their band\n")

	code, js, errOut := cli(t, "validate", "--json")
	require.Equal(t, 0, code, errOut)
	var rows []validateRow
	require.NoError(t, json.Unmarshal([]byte(js), &rows))
	require.Len(t, rows, len(costmodel.Published))
	for _, r := range rows {
		assert.True(t, r.OK, "%+v", r)
		assert.InDelta(t, r.Predicted/r.Published-1, r.Error, 1e-12)
	}
}

// A row outside its band fails the command (exit 1), naming how many.
func TestValidateFailsOutsideTheBand(t *testing.T) {
	saved := costmodel.Published
	t.Cleanup(func() { costmodel.Published = saved })
	costmodel.Published = append(append([]costmodel.Row(nil), saved...), costmodel.Row{Name: "off", Source: "a test", Config: "a row the model misses",
		Unit: "ms", Value: 10, Lo: 0.75, Hi: 1.25, Model: func() float64 { return 20 }})
	code, out, errOut := cli(t, "validate")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "FAIL (band 0.75-1.25)")
	assert.Contains(t, errOut, "1 of ")
	code, _, errOut = cli(t, "validate", "extra")
	assert.Equal(t, 2, code, errOut)
}
