package runspec

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/costmodel"
	"github.com/rankrun/rankrun/topology"
)

// The default sample under sim is one element of each head, two where an
// element is one byte (a value of one byte tells only 256 places apart),
// whatever the host: the fewest that divide the head.
func TestDefaultSample(t *testing.T) {
	for _, tc := range []struct {
		name          string
		headDim, elem int
		want          int
	}{
		{"llama-3-70b", costmodel.Models["llama-3-70b"].Geometry(16).HeadDim, 2, 128},
		{"deepseek-r1's MLA half", costmodel.Models["deepseek-r1"].Geometry(16).HeadDim, 2, 288},
		{"fp8 cache", 128, 1, 64},
		{"fp8, one element", 1, 1, 1},
		{"fp8, odd head", 3, 1, 1},
		{"fp32", 64, 4, 64},
	} {
		g := topology.Model{Layers: 2, KVHeads: 2, HeadDim: tc.headDim, TokensPerBlock: 16, ElemBytes: tc.elem}
		assert.Equal(t, tc.want, defaultSample(g), tc.name)
	}
}

// The default sample is the same on a small host and a large one, and the
// spec says so; the local backend, which cannot sample, refuses pools the
// host cannot hold, naming the flags and the way out; a host too small
// even for the default sample is refused; an explicit --kv-sample is the
// user's and never overridden.
func TestSampleWhateverTheHost(t *testing.T) {
	args := []string{"--backend", "sim", "--model", "llama-3-8b", "--hardware", "h100",
		"--ctx", "tp=1", "--gen", "tp=2", "--requests", "2", "--input", "512", "--output", "4", "--arrival", "closed=1"}
	spec := func(host int64, extra ...string) Spec {
		t.Helper()
		s, err := Parse(append(append([]string{}, args...), extra...))
		require.NoError(t, err)
		s.HostMemory = host
		return s
	}
	full := costmodel.Models["llama-3-8b"].Geometry(16).HeadDim
	for _, host := range []int64{64 << 20, 64 << 30} {
		s := spec(host)
		c, err := s.Config()
		require.NoError(t, err, "host %d", host)
		assert.Equal(t, full/128, c.Model.HeadDim, "one element of each head on a host of %d bytes", host)
		assert.Equal(t, 128, s.PayloadScale())
		assert.Contains(t, s.SampleNote, "the default sample: one element of each head proves where every (request, block, layer, K/V, head, token) lands")
	}

	refused := func(s Spec, want ...string) {
		t.Helper()
		_, err := s.Config()
		require.Error(t, err)
		var se *Error
		require.ErrorAs(t, err, &se)
		for _, w := range want {
			assert.Contains(t, err.Error(), w)
		}
	}
	local := spec(64<<20, "--backend", "local")
	refused(local, "more than this host's 64.00 MiB of memory", "--backend sim samples the KV heads to fit")
	refused(spec(1<<20), "even with the default sample of each head (--kv-sample 128), more than half this host's 1.00 MiB")
	refused(spec(64<<20, "--kv-sample", "1"), "more than this host's 64.00 MiB of memory")
}
