package runspec

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Default is what Register sets, and each call's Set is its own.
func TestDefaultIsRegister(t *testing.T) {
	var want Spec
	want.Register(flag.NewFlagSet("", flag.ContinueOnError), true)
	a, b := Default(), Default()
	a.Set["requests"] = true
	assert.False(t, b.Set["requests"], "a Default's Set is its own")
	b.Set = nil
	assert.Equal(t, want, b)
}

// Every refusal names the flag it is about, in its message and as Field.
func TestErrorNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"--ctx", "tp=0"}, "ctx"},
		{[]string{"--gen-blocks", "0"}, "gen-blocks"},
		{[]string{"--checked", "--unchecked"}, "checked"},
		{[]string{"--transfer", "later"}, "transfer"},
		{[]string{"--arrival", "poisson=0.0000001", "--requests", "100"}, "arrival"},
		{[]string{"--kv-sample", "2"}, "kv-sample"},
		{[]string{"--layers", "2", "--model", "llama-3-8b", "--hardware", "h100"}, "layers"},
		{[]string{"--fault", "exit@gen:9,req=1"}, "fault"},
	} {
		s, err := Parse(tc.args)
		require.NoError(t, err, "%v", tc.args)
		_, err = s.Config()
		var se *Error
		require.ErrorAs(t, err, &se, "%v", tc.args)
		assert.Equal(t, tc.field, se.Field, "%v: %v", tc.args, err)
		assert.Contains(t, err.Error(), "--"+tc.field, "%v", tc.args)
	}
	_, err := Parse([]string{"--ctx", "tp=1", "stray"})
	require.ErrorContains(t, err, `unexpected argument "stray"`)
	_, err = Parse([]string{"--no-such-flag"})
	require.Error(t, err)
}

func TestFieldOf(t *testing.T) {
	for msg, want := range map[string]string{
		"--ctx-blocks 0: must be at least 1":  "ctx-blocks",
		"--ctx: bad layout":                   "ctx",
		"--ctx-blocks 4, --gen-blocks 4: big": "ctx-blocks",
		"--kv-sample=3 is odd":                "kv-sample",
		"executor: bad configuration":         "",
	} {
		assert.Equal(t, want, fieldOf(msg), msg)
	}
}
