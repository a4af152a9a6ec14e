package kvpool

import "sync"

// Arena holds the storage of the pools of one run, outside the Go heap
// where the platform allows (anonymous memory mapped for it, with huge
// pages advised on Linux), and frees all of it at once. A run's pools are
// most of its memory: on the Go heap they set its collector's goal, so a
// run that allocates a few megabytes a second lets its garbage land on
// fresh pages until the heap doubles (each first touch a page fault, which
// costs microseconds on a virtual machine), and its peak memory grows by
// as much. Off the heap, the collector's goal is what the run's other
// objects make it.
//
// Free must come after the last use of every pool of the arena (the run
// has returned: no rank, event or message reads a block again); memory
// the arena handed out is not the Go heap's, so a block slice does not keep
// it alive. The zero value and nil are usable: a nil arena allocates on
// the Go heap and frees nothing. Under the race detector, whose shadow
// covers only the Go heap, the arena's storage is the Go heap's too, so a
// block read while another rank writes it is still caught.
type Arena struct {
	mu     sync.Mutex
	mapped [][]byte
}

// NewArena returns an empty arena.
func NewArena() *Arena { return &Arena{} }

// alloc returns n zeroed bytes.
func (a *Arena) alloc(n int) []byte {
	if a == nil || n == 0 {
		return make([]byte, n)
	}
	b, ok := mapAnon(n)
	if !ok {
		return make([]byte, n)
	}
	a.mu.Lock()
	a.mapped = append(a.mapped, b)
	a.mu.Unlock()
	return b
}

// Free releases everything the arena handed out; it may be called more
// than once, and on nil.
func (a *Arena) Free() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range a.mapped {
		unmapAnon(b)
	}
	a.mapped = nil
}
