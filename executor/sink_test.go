package executor_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/executor"
	"github.com/rankrun/rankrun/request"
	"github.com/rankrun/rankrun/transceiver"
)

// countingSink is a Sink that keeps what it was given, for the test.
type countingSink struct {
	mu      sync.Mutex
	records map[request.ID]int
	events  map[int]int // by track (world rank)
}

func (s *countingSink) Record(q executor.RequestRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[q.ID]++
}

func (s *countingSink) Event(ev executor.TraceEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events[ev.TID]++
}

// With a Sink, every record and trace event goes to it as the run goes
// (from every rank of the process, once each) and the reports keep none:
// what the run holds does not grow with it. Without one they are kept.
func TestSinkTakesRecordsAndEvents(t *testing.T) {
	for _, mode := range []transceiver.Mode{transceiver.Async, transceiver.Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := baseConfig("tp=2", "dp=2,adp", mode)
			cfg.Trace, cfg.Records = true, true
			kept := run(t, cfg)
			require.Len(t, kept.Requests, cfg.Workload.Requests, "no sink: the report keeps the records")

			sink := &countingSink{records: map[request.ID]int{}, events: map[int]int{}}
			cfg.Sink = sink
			rep := run(t, cfg)
			require.Empty(t, rep.Errors)
			assert.Empty(t, rep.Requests, "the records went to the sink")
			require.Len(t, rep.Ranks_, 4)
			for _, rr := range rep.Ranks_ {
				assert.Empty(t, rr.Trace, "world rank %d kept its events", rr.WorldRank)
				assert.Positive(t, sink.events[rr.WorldRank], "world rank %d: no event reached the sink", rr.WorldRank)
			}
			require.Len(t, sink.records, cfg.Workload.Requests)
			for id, n := range sink.records {
				assert.Equal(t, 1, n, "request %d recorded %d times", id, n)
			}
		})
	}
}
