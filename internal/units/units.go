// Package units renders quantities for people: byte counts with a binary
// unit. The reports and the command line share it so a size reads the
// same everywhere.
package units

import "fmt"

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
