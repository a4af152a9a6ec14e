package reqtrace

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzRead: any bytes give a trace that keeps the package's promises
// (at least one row, lengths in [1, MaxTokens], times from 0 that never
// go back) or one error line; never a panic.
func FuzzRead(f *testing.F) {
	f.Add([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"))
	f.Add([]byte(`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}` + "\n" + `{"timestamp": 0, "input_length": 7, "output_length": 5}`))
	f.Add([]byte("GeneratedTokens,TIMESTAMP,ContextTokens\r\n7,2023-11-16 18:00:00.5,100\r\n"))
	f.Add([]byte(`{"timestamp": 5, "input_length": -1}`))
	f.Add([]byte("\ufeff\n"))
	f.Add([]byte("\ufeff{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1}}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := Read("fuzz", bytes.NewReader(b))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("a multi-line error: %q", err)
			}
			return
		}
		if len(tr.Requests) == 0 {
			t.Fatal("a trace without rows")
		}
		for i, r := range tr.Requests {
			if r.Input < 1 || r.Output < 1 || r.Input > MaxTokens || r.Output > MaxTokens {
				t.Fatalf("row %d: lengths %d/%d", i, r.Input, r.Output)
			}
			if i > 0 && r.At < tr.Requests[i-1].At {
				t.Fatalf("row %d goes back in time", i)
			}
		}
		if tr.Format == AzureCSV && tr.Requests[0].At != 0 {
			t.Fatalf("Azure's first row at %v, not 0", tr.Requests[0].At)
		}
	})
}
