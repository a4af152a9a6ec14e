// Reading the raw outputs of scripts/bench.sh: go test -bench lines, its
// JSON files, an mpirun run's report.

package benchtab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/rankrun/rankrun/executor"
)

// goBench holds parsed `go test -bench` lines: name (without the -GOMAXPROCS
// suffix) -> unit -> value.
type goBench map[string]map[string]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

func parseGoBench(path string) (goBench, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := goBench{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || !strings.HasPrefix(fs[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(fs[0], "Benchmark"), "")
		m := map[string]float64{}
		if n, err := strconv.ParseFloat(fs[1], 64); err == nil {
			m["N"] = n
		}
		for i := 2; i+1 < len(fs); i += 2 {
			if v, err := strconv.ParseFloat(fs[i], 64); err == nil {
				m[fs[i+1]] = v
			}
		}
		out[name] = m
	}
	return out, sc.Err()
}

// readRawJSON decodes raw/name into v; a decoding error names the file.
func readRawJSON(raw, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(raw, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// readReport reads an mpirun run's JSON report; one without idle handovers
// measured nothing the table can use.
func readReport(path string) (*executor.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r executor.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.IdleHandoverMs.N == 0 {
		return nil, fmt.Errorf("%s: no idle handovers in the report", path)
	}
	return &r, nil
}
