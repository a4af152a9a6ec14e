package reqtrace

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The shipped traces read whole, with the counts and means their README
// gives.
func TestShippedTraces(t *testing.T) {
	for _, c := range []struct {
		file              string
		format            Format
		rows              int
		meanIn, meanOut   float64
		prefixes          bool
		firstIn, firstOut int
		lastAt            time.Duration
	}{
		{"AzureLLMInferenceTrace_conv.csv", AzureCSV, 19366, 1155, 211, false, 374, 44, 58*time.Minute + 21*time.Second + 721937*time.Microsecond},
		{"AzureLLMInferenceTrace_code.csv", AzureCSV, 8819, 2048, 28, false, 4808, 10, 57*time.Minute + 15*time.Second + 948056*time.Microsecond},
		{"mooncake_conversation_trace.jsonl", MooncakeJSONL, 12031, 12035, 343, true, 6758, 500, 3536999 * time.Millisecond},
	} {
		t.Run(c.file, func(t *testing.T) {
			tr, err := Load("../traces/" + c.file)
			require.NoError(t, err)
			require.Equal(t, c.format, tr.Format)
			require.Len(t, tr.Requests, c.rows)
			require.Equal(t, c.prefixes, tr.HasPrefixes())
			var in, out float64
			for _, r := range tr.Requests {
				in += float64(r.Input)
				out += float64(r.Output)
			}
			require.InEpsilon(t, c.meanIn, in/float64(c.rows), 0.01)
			require.InEpsilon(t, c.meanOut, out/float64(c.rows), 0.01)
			require.Equal(t, time.Duration(0), tr.Requests[0].At)
			require.Equal(t, c.firstIn, tr.Requests[0].Input)
			require.Equal(t, c.firstOut, tr.Requests[0].Output)
			require.Equal(t, c.lastAt, tr.Requests[c.rows-1].At)
		})
	}
}

// Azure's 7 fractional digits are kept to the 100 ns, relative to the
// first row.
func TestAzureTimes(t *testing.T) {
	tr, err := Read("a.csv", strings.NewReader("TIMESTAMP,ContextTokens,GeneratedTokens\n"+
		"2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:46.6805900,10,1\n2023-11-16 18:15:50.9951690,396,109\n"))
	require.NoError(t, err)
	require.Equal(t, []time.Duration{0, 0, 4314579 * time.Microsecond}, []time.Duration{tr.Requests[0].At, tr.Requests[1].At, tr.Requests[2].At})
	// Columns in another order are read by name.
	tr, err = Read("b.csv", strings.NewReader("GeneratedTokens,TIMESTAMP,ContextTokens\r\n7,2023-11-16 18:00:00.5,100\r\n"))
	require.NoError(t, err)
	require.Equal(t, Request{Input: 100, Output: 7}, tr.Requests[0])
}

// A byte-order mark is no text; Mooncake's times count from the first
// row too (its published traces start at 0).
func TestFirstRow(t *testing.T) {
	tr, err := Read("m", strings.NewReader("\ufeff{\"timestamp\": 60000, \"input_length\": 3, \"output_length\": 1}\n{\"timestamp\": 65000, \"input_length\": 4, \"output_length\": 2}\n"))
	require.NoError(t, err)
	require.Equal(t, MooncakeJSONL, tr.Format)
	require.Equal(t, []time.Duration{0, 5 * time.Second}, []time.Duration{tr.Requests[0].At, tr.Requests[1].At})
	tr, err = Read("a", strings.NewReader("\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1,1\n"))
	require.NoError(t, err)
	require.Equal(t, AzureCSV, tr.Format)
}

// A window whose replayed arrivals would span more than MaxSpan (a small
// scale, or rows a century apart) is refused, never wrapped.
func TestSpanBound(t *testing.T) {
	tr, err := Read("wide.csv", strings.NewReader("TIMESTAMP,ContextTokens,GeneratedTokens\n1970-01-02 00:00:00,1,1\n2199-01-01 00:00:00,1,1\n"))
	require.NoError(t, err)
	_, err = Replay{Trace: tr, Scale: 1}.Requests()
	require.ErrorContains(t, err, "more than 1e+08 s")
	tr, err = Load("../traces/AzureLLMInferenceTrace_conv.csv")
	require.NoError(t, err)
	_, err = Replay{Trace: tr, Scale: 1e-6}.Requests()
	require.ErrorContains(t, err, "spans 3.5e+09 s at scale 1e-06")
	_, err = Replay{Trace: tr, Scale: 1e-4}.Requests()
	require.NoError(t, err)
}

// Every malformed file is one line naming the file, line, column and rule.
func TestBadTraces(t *testing.T) {
	long := `{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [` + strings.Repeat("1, ", MaxLine/3) + "1]}\n"
	for _, c := range []struct{ name, body, want string }{
		{"empty", "", "bad: empty: no rows"},
		{"header only", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "a header and no rows"},
		{"missing column", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,1\n", "bad:1:1: the header lacks column GeneratedTokens"},
		{"negative input", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,-5,3\n", "bad:2:24: ContextTokens \"-5\": must be at least 1 token"},
		{"zero output", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,0\n", "bad:2:26: GeneratedTokens \"0\": must be at least 1 token"},
		{"bad time", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16T18:15,5,1\n", "bad:2:1: TIMESTAMP"},
		{"year", "TIMESTAMP,ContextTokens,GeneratedTokens\n0001-11-16 18:15:46.68,5,1\n", "bad:2:1: TIMESTAMP \"0001-11-16 18:15:46.68\": want a datetime between 1970 and 2200"},
		{"fields", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5\n", "bad:2:1: 2 fields, the header has 3"},
		{"azure out of order", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,1\n2023-11-16 18:15:46.67,5,1\n", "bad:3:1: out of order"},
		{"mooncake out of order", "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 4, \"input_length\": 1, \"output_length\": 1}\n", "bad:2:1: out of order"},
		{"mooncake negative", "{\"timestamp\": 5, \"input_length\": -1, \"output_length\": 1}\n", "bad:1:18: input_length -1: must be at least 1 token"},
		{"mooncake missing", "{\"timestamp\": 5, \"output_length\": 1}\n", "bad:1:1: the row lacks input_length"},
		{"mooncake syntax", "{\"timestamp\": 5, \"input_length\" 1}\n", "bad:1:"},
		{"mooncake negative time", "{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1}\n", "bad:1:2: timestamp -1"},
		{"mooncake hash", "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, -2]}\n", "bad:1:57: hash_ids[1] = -2"},
		{"line too long", long, "bad:1:1: a line longer than 1048576 bytes"},
		{"byte-order mark alone", "\ufeff\n", "bad: empty: no rows"},
		{"text after the object", "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1}}\n", "bad:1:56: text after the row's JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read("bad", strings.NewReader(c.body))
			require.Error(t, err)
			require.NotContains(t, err.Error(), "\n")
			require.Contains(t, err.Error(), c.want)
		})
	}
}

func TestWindowAndScale(t *testing.T) {
	tr := &Trace{Name: "t", Requests: []Request{{At: 0, Input: 1, Output: 1}, {At: time.Second, Input: 2, Output: 1}, {At: time.Second, Input: 3, Output: 1},
		{At: 3 * time.Second, Input: 4, Output: 1}, {At: 7 * time.Second, Input: 5, Output: 1}}}
	got, err := tr.Select(Window{From: time.Second, Span: 3 * time.Second})
	require.NoError(t, err)
	require.Equal(t, []Request{{At: 0, Input: 2, Output: 1}, {At: 0, Input: 3, Output: 1}, {At: 2 * time.Second, Input: 4, Output: 1}}, got)
	// The window's end is open: a row at from+span is the next window's.
	got, err = tr.Select(Window{From: time.Second, Span: 2 * time.Second})
	require.NoError(t, err)
	require.Len(t, got, 2)
	got, err = tr.Select(Window{First: 2})
	require.NoError(t, err)
	require.Len(t, got, 2)
	_, err = tr.Select(Window{From: 8 * time.Second})
	require.ErrorContains(t, err, "holds no request")
	_, err = tr.Select(Window{From: 3 * time.Second, First: 3})
	require.ErrorContains(t, err, "holds 2 requests, fewer than the 3 asked")
	r := Replay{Trace: tr, Scale: 2}
	got, err = r.Requests()
	require.NoError(t, err)
	require.Equal(t, 3500*time.Millisecond, got[4].At)
	rate, err := r.RecordedRate()
	require.NoError(t, err)
	require.InDelta(t, 4.0/7, rate, 1e-12, "4 gaps over 7 s")
	l := Measure(got)
	require.Equal(t, Lengths{InputP50: 3, InputP99: 5, OutputP50: 1, OutputP99: 1, InputMax: 5, OutputMax: 1}, l)
}

func TestParseReplay(t *testing.T) {
	r, err := ParseReplay("../traces/AzureLLMInferenceTrace_code.csv:from=1m:span=10m:scale=2.5")
	require.NoError(t, err)
	require.Equal(t, Window{From: time.Minute, Span: 10 * time.Minute}, r.Window)
	require.Equal(t, 2.5, r.Scale)
	require.Equal(t, "trace=../traces/AzureLLMInferenceTrace_code.csv:from=1m0s:span=10m0s:scale=2.5", r.String())
	again, err := ParseReplay(strings.TrimPrefix(r.String(), "trace="))
	require.NoError(t, err)
	require.Equal(t, r, again)
	for spec, want := range map[string]string{
		"":                        "FILE: the trace's path is empty",
		"x.csv:scale=0":           "scale: want a factor",
		"x.csv:span=0s":           "span: want a positive duration",
		"x.csv:bogus=1":           "bogus: unknown key",
		"x.csv:poisson=2:scale=3": "scale: poisson=R sets the arrivals itself",
		"x.csv:from=1m:from=2m":   "from: given twice",
		"/nonexistent.csv":        "no such file",
	} {
		_, err := ParseReplay(spec)
		require.ErrorContains(t, err, want, spec)
	}
}

// The LRU's hits, worked by hand: capacity 2 blocks, one instance.
func TestPrefixReuse(t *testing.T) {
	reqs := []Request{
		{Input: 1000, Blocks: []uint64{1, 2}},    // cold: 0; cache [2 1]
		{Input: 1500, Blocks: []uint64{1, 2, 3}}, // 1,2 hit: 1024; cache [3 2] (1 evicted)
		{Input: 600, Blocks: []uint64{1, 3}},     // 1 missed: 0; cache [3 1]
		{Input: 300, Blocks: []uint64{3}},        // 3 hits, capped at input-1: 299
		{Input: 700},                             // no ids: 0
	}
	u := PrefixReuse(reqs, 1, 2, 512)
	require.Equal(t, Reuse{InputTokens: 4100, Hit: 1024 + 299, CapacityBlocks: 2}, u)
	// Unbounded, request 2's blocks 1 and 3 are both still there: it
	// skips all but its last token.
	require.Equal(t, int64(1024+599+299), PrefixReuse(reqs, 1, 0, 512).Hit)
	// Two instances see alternate requests: request 2 (instance 0) hits
	// request 0's block 1 and misses 3 (cached on instance 1 only);
	// request 3 (instance 1) hits request 1's block 3.
	require.Equal(t, int64(512+299), PrefixReuse(reqs, 2, 0, 512).Hit)
	// Mooncake's conversation trace reuses a large share of its prefill.
	tr, err := Load("../traces/mooncake_conversation_trace.jsonl")
	require.NoError(t, err)
	all := PrefixReuse(tr.Requests, 1, 0, BlockTokens).Share()
	small := PrefixReuse(tr.Requests, 1, 1000, BlockTokens).Share()
	require.Greater(t, all, 0.3)
	require.Less(t, small, all)
}
