package units

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1": 1, "1024": 1024, "1KiB": 1024, "1.5 MiB": 3 << 19, "2GiB": 2 << 30, "1GB": 1e9, "3kB": 3000, "7B": 7, "1TiB": 1 << 40} {
		got, err := ParseBytes(in, 1<<40)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0", "-1", "x", "1XB", "2TiB", "NaN"} {
		_, err := ParseBytes(in, 1<<40)
		assert.Error(t, err, in)
	}
	_, err := ParseBytes("2TiB", 1<<40)
	assert.EqualError(t, err, "must be a positive size of at most 1TiB, such as 1073741824, 512MiB or 2GiB")
	_, err = ParseBytes("2MiB", 1<<20)
	assert.ErrorContains(t, err, "at most 1MiB")
}

func TestBytes(t *testing.T) {
	assert.Equal(t, "7 B", Bytes(7))
	assert.Equal(t, "1.5 KiB", Bytes(1536))
	assert.Equal(t, "64.00 MiB", Bytes(64<<20))
	assert.Equal(t, "512.00 MiB", Bytes(1<<29))
	assert.Equal(t, "2.00 GiB", Bytes(2<<30))
}
