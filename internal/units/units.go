// Package units renders quantities for people, and reads them back: byte
// counts with a binary unit. The reports and the command line share it so
// a size reads the same everywhere.
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// Bytes renders a byte count with a binary unit (B, KiB, MiB, GiB).
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// ParseBytes parses a byte count of at most limit: a plain integer or one
// with a binary (KiB, MiB, GiB, TiB) or decimal (kB, MB, GB, TB) suffix.
func ParseBytes(s string, limit int64) (int64, error) {
	s = strings.TrimSpace(s)
	suffixes := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := int64(1)
	for _, u := range suffixes {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 || v*float64(mult) > float64(limit) {
		return 0, fmt.Errorf("must be a positive size of at most %s, such as 1073741824, 512MiB or 2GiB", sizeOf(limit))
	}
	n := int64(v * float64(mult))
	if n <= 0 {
		return 0, fmt.Errorf("must be at least 1 byte")
	}
	return n, nil
}

// sizeOf is limit as ParseBytes's refusal says it: "1TiB" for 1<<40.
func sizeOf(limit int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if limit >= u.mult && limit%u.mult == 0 {
			return fmt.Sprintf("%d%s", limit/u.mult, u.suffix)
		}
	}
	return fmt.Sprintf("%d bytes", limit)
}
