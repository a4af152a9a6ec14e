package executor

import (
	"math"
	"time"
)

// Seq is one request of a compute batch: its tokens (prefill: the prompt,
// or under chunked prefill this step's chunk of it; decode: the context so
// far, prompt plus tokens generated) and its DP index on the side that
// computes. Past and Partial are a chunked prefill's: the prompt tokens
// earlier steps prefilled (their KV is read, not written) and whether the
// prompt goes on past this chunk (no first token is sampled); both zero
// for a whole prompt and for decode.
type Seq struct {
	Tokens  int
	DP      int
	Past    int
	Partial bool
}

// Compute is a compute cost model: how long one executor group takes to
// prefill a batch and to run one decode step. The executor sleeps what it
// answers through its clock (virtual time under the sim backend). Both
// methods must be pure and safe for concurrent use: every rank of a group
// asks with the same batch and must get the same answer. The batch slice is
// the caller's and is reused after the call.
type Compute interface {
	Prefill(batch []Seq) time.Duration
	Decode(batch []Seq) time.Duration
}

// prefillTime is the modelled time of a CTX step's chunks:
// PrefillPerToken a token when set (an explicit override), else Compute's
// answer, else nothing.
func (c *Config) prefillTime(batch []chunk, buf []Seq, members int) (time.Duration, []Seq) {
	if c.PrefillPerToken > 0 || c.Compute == nil {
		var tokens int64
		for _, k := range batch {
			tokens += k.n
		}
		if c.PrefillPerToken > 0 && tokens > math.MaxInt64/int64(c.PrefillPerToken) {
			return math.MaxInt64, buf // never, not a wrapped product: the run's deadline ends it
		}
		return time.Duration(tokens) * c.PrefillPerToken, buf
	}
	buf = buf[:0]
	for _, k := range batch {
		buf = append(buf, Seq{Tokens: int(k.n), DP: int(k.r.CtxDP), Past: int(k.past), Partial: !k.last()})
	}
	return c.steps.time(false, buf, members, c.Compute.Prefill), buf
}

// decodeTime is the modelled time of one GEN decode step over batch:
// DecodePerStep when set, else Compute's answer, else nothing. members is
// the size of the group that asks (stepMemo).
func (c *Config) decodeTime(batch []Seq, members int) time.Duration {
	if c.DecodePerStep > 0 || c.Compute == nil {
		return c.DecodePerStep
	}
	return c.steps.time(true, batch, members, c.Compute.Decode)
}
