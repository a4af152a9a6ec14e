// Package request holds the small types every layer uses to speak of one
// request: its ID, and its Status as it ends (the outcome of its transfer
// and of the request itself). It is a leaf: it imports nothing of rankrun.
package request

import (
	"fmt"
	"strconv"
)

// ID names a request across ranks (1-based in a workload).
type ID uint64

func (id ID) String() string { return "req-" + strconv.FormatUint(uint64(id), 10) }

// Status is how a request (or its KV transfer) stands.
type Status uint8

// Statuses, ordered so that a larger terminal status wins when ranks report
// different ones (DESIGN.md §4: cancelled > failed > completed).
const (
	Pending   Status = iota // not ended
	Completed               // ended well (a transfer: every byte delivered and verified)
	Failed                  // ended by an error
	Cancelled               // ended by a cancel
)

var names = [...]string{"pending", "completed", "failed", "cancelled"}

func (s Status) String() string {
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Terminal reports whether s is an end (completed, failed or cancelled).
func (s Status) Terminal() bool { return s >= Completed && s <= Cancelled }

// Worse returns the status that wins between two reports of one request:
// cancelled > failed > completed > pending.
func Worse(a, b Status) Status { return max(a, b) }

// MarshalText writes the status's name (reports carry "completed").
func (s Status) MarshalText() ([]byte, error) {
	if int(s) >= len(names) {
		return nil, fmt.Errorf("request: status %d out of range", uint8(s))
	}
	return []byte(names[s]), nil
}

// UnmarshalText reads a status's name.
func (s *Status) UnmarshalText(b []byte) error {
	for i, n := range names {
		if string(b) == n {
			*s = Status(i)
			return nil
		}
	}
	return fmt.Errorf("request: unknown status %q (want pending, completed, failed or cancelled)", b)
}
