package reqtrace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Load reads the trace at path. A process that replays one trace many
// times (a sweep's cells, goodput's probes) reads it once: the result is
// kept per path and modification time, and must not be changed.
func Load(path string) (*Trace, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reqtrace: %w", err)
	}
	key := cacheKey{path, st.ModTime(), st.Size()}
	cache.Lock()
	t, ok := cache.m[key]
	cache.Unlock()
	if ok {
		return t, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reqtrace: %w", err)
	}
	defer f.Close()
	if t, err = Read(path, f); err != nil {
		return nil, err
	}
	cache.Lock()
	cache.m[key] = t
	cache.Unlock()
	return t, nil
}

type cacheKey struct {
	path string
	mod  time.Time
	size int64
}

var cache = struct {
	sync.Mutex
	m map[cacheKey]*Trace
}{m: map[cacheKey]*Trace{}}

// Read reads a trace from r; name names it in errors. The format is the
// content's: a first non-blank byte '{' is Mooncake's JSON lines, anything
// else Azure's CSV.
func Read(name string, r io.Reader) (*Trace, error) {
	p := &parser{name: name, sc: bufio.NewScanner(r)}
	p.sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	t := &Trace{Name: name}
	first := true
	for p.next() {
		if first {
			// A byte-order mark before the first line's text is no text.
			p.line = bytes.TrimPrefix(p.line, []byte("\ufeff"))
		}
		if len(bytes.TrimSpace(p.line)) == 0 {
			continue
		}
		if first {
			first = false
			if bytes.TrimLeft(p.line, " \t")[0] == '{' {
				t.Format = MooncakeJSONL
			} else {
				t.Format = AzureCSV
				if err := p.header(); err != nil {
					return nil, err
				}
				continue
			}
		}
		var req Request
		var err error
		if t.Format == MooncakeJSONL {
			req, err = p.jsonRow()
		} else {
			req, err = p.csvRow()
		}
		if err != nil {
			return nil, err
		}
		if n := len(t.Requests); n > 0 && req.At < t.Requests[n-1].At {
			return nil, p.errf(1, "out of order: arrives at %v, before the row above (%v); rows must not go back in time", req.At, t.Requests[n-1].At)
		}
		t.Requests = append(t.Requests, req)
	}
	if err := p.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			p.lineNo++
			return nil, p.errf(1, "a line longer than %d bytes (the limit)", MaxLine)
		}
		return nil, fmt.Errorf("reqtrace: %s: %w", name, err)
	}
	if len(t.Requests) == 0 {
		what := "empty: no rows"
		if t.Format == AzureCSV {
			what = "a header and no rows"
		}
		return nil, fmt.Errorf("reqtrace: %s: %s (want Azure's CSV with header TIMESTAMP,ContextTokens,GeneratedTokens or Mooncake's JSON lines)", name, what)
	}
	// Times count from the first row in both formats (Mooncake's first is
	// 0 in the published traces; Azure's is a wall-clock time).
	base := t.Requests[0].At
	for i := range t.Requests {
		t.Requests[i].At -= base
	}
	return t, nil
}

type parser struct {
	name   string
	sc     *bufio.Scanner
	line   []byte
	lineNo int
	cols   [3]int // Azure: the column index of TIMESTAMP, ContextTokens, GeneratedTokens
	ncols  int
}

func (p *parser) next() bool {
	if !p.sc.Scan() {
		return false
	}
	p.line = bytes.TrimRight(p.sc.Bytes(), "\r")
	p.lineNo++
	return true
}

// errf is one error line naming the file, the line, the column (1-based,
// in bytes) and the rule.
func (p *parser) errf(col int, format string, args ...any) error {
	return fmt.Errorf("reqtrace: %s:%d:%d: %s", p.name, p.lineNo, col, fmt.Sprintf(format, args...))
}

var azureColumns = [3]string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"}

func (p *parser) header() error {
	fields := strings.Split(strings.TrimPrefix(string(p.line), "\ufeff"), ",")
	p.ncols = len(fields)
	for i, want := range azureColumns {
		p.cols[i] = -1
		for j, f := range fields {
			if strings.TrimSpace(f) == want {
				p.cols[i] = j
			}
		}
		if p.cols[i] < 0 {
			return p.errf(1, "the header lacks column %s (want TIMESTAMP,ContextTokens,GeneratedTokens; a JSON-lines trace starts with '{')", want)
		}
	}
	return nil
}

// azureTime is Azure's TIMESTAMP layout; Go's parser takes any number of
// fractional digits after the seconds.
const azureTime = "2006-01-02 15:04:05"

func (p *parser) csvRow() (Request, error) {
	fields := strings.Split(string(p.line), ",")
	if len(fields) != p.ncols {
		return Request{}, p.errf(1, "%d fields, the header has %d", len(fields), p.ncols)
	}
	colOf := func(i int) int { // the 1-based byte column of field i
		c := 1
		for _, f := range fields[:i] {
			c += len(f) + 1
		}
		return c
	}
	var req Request
	ti := p.cols[0]
	ts, err := time.Parse(azureTime, strings.TrimSpace(fields[ti]))
	if err != nil || ts.Year() < 1970 || ts.Year() > 2200 { // UnixNano holds 1678-2262
		return Request{}, p.errf(colOf(ti), "TIMESTAMP %q: want a datetime between 1970 and 2200, such as 2023-11-16 18:15:46.6805900", fields[ti])
	}
	req.At = time.Duration(ts.UnixNano())
	for k, dst := range []*int{&req.Input, &req.Output} {
		i := p.cols[k+1]
		n, err := tokens(strings.TrimSpace(fields[i]))
		if err != nil {
			return Request{}, p.errf(colOf(i), "%s %q: %v", azureColumns[k+1], fields[i], err)
		}
		*dst = n
	}
	return req, nil
}

// tokens parses a length: an integer in [1, MaxTokens].
func tokens(s string) (int, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return 0, errors.New("want a whole number of tokens")
	case n < 1:
		return 0, errors.New("must be at least 1 token")
	case n > MaxTokens:
		return 0, fmt.Errorf("at most %d tokens", MaxTokens)
	}
	return int(n), nil
}

type mooncakeRow struct {
	Timestamp *json.Number `json:"timestamp"`
	Input     *json.Number `json:"input_length"`
	Output    *json.Number `json:"output_length"`
	HashIDs   []int64      `json:"hash_ids"`
}

func (p *parser) jsonRow() (Request, error) {
	var row mooncakeRow
	dec := json.NewDecoder(bytes.NewReader(p.line))
	dec.UseNumber()
	if err := dec.Decode(&row); err != nil {
		col := 1
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			col = int(se.Offset)
		case errors.As(err, &te):
			col = p.keyCol(te.Field)
		}
		return Request{}, p.errf(col, "not a JSON object of timestamp, input_length, output_length, hash_ids: %v", err)
	}
	if rest := p.line[dec.InputOffset():]; len(bytes.TrimSpace(rest)) > 0 {
		return Request{}, p.errf(int(dec.InputOffset())+1, "text after the row's JSON object")
	}
	var req Request
	for _, f := range []struct {
		key string
		v   *json.Number
		dst *int
	}{{"timestamp", row.Timestamp, nil}, {"input_length", row.Input, &req.Input}, {"output_length", row.Output, &req.Output}} {
		if f.v == nil {
			return Request{}, p.errf(1, "the row lacks %s", f.key)
		}
		if f.dst == nil {
			ms, err := strconv.ParseInt(f.v.String(), 10, 64)
			if err != nil || ms < 0 || ms > int64(100*365*24*time.Hour/time.Millisecond) {
				return Request{}, p.errf(p.keyCol(f.key), "timestamp %s: want whole milliseconds from the trace's start, at least 0", f.v)
			}
			req.At = time.Duration(ms) * time.Millisecond
			continue
		}
		n, err := tokens(f.v.String())
		if err != nil {
			return Request{}, p.errf(p.keyCol(f.key), "%s %s: %v", f.key, f.v, err)
		}
		*f.dst = n
	}
	if len(row.HashIDs) > 0 {
		req.Blocks = make([]uint64, len(row.HashIDs))
		for i, id := range row.HashIDs {
			if id < 0 {
				return Request{}, p.errf(p.keyCol("hash_ids"), "hash_ids[%d] = %d: must not be negative", i, id)
			}
			req.Blocks[i] = uint64(id)
		}
	}
	return req, nil
}

// keyCol is the 1-based column of key's name on the line (1 if absent).
func (p *parser) keyCol(key string) int {
	if i := bytes.Index(p.line, []byte(`"`+key+`"`)); i >= 0 {
		return i + 1
	}
	return 1
}
