package consensus

import "slices"

// Helpers over sorted, duplicate-free []uint64. Each appends to dst[:0] and
// returns it; dst must not alias an input.

// normalize copies src into dst sorted and without duplicates.
func normalize(dst, src []uint64) []uint64 {
	dst = append(dst[:0], src...)
	if !slices.IsSorted(dst) {
		slices.Sort(dst)
	}
	return slices.Compact(dst)
}

// strictlyAscending reports whether s is sorted without duplicates.
func strictlyAscending(s []uint64) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}

func intersectInto(dst, a, b []uint64) []uint64 {
	dst = dst[:0]
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			dst = append(dst, a[i])
			i++
			j++
		}
	}
	return dst
}

func unionInto(dst, a, b []uint64) []uint64 {
	dst = dst[:0]
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			dst = append(dst, a[i])
			i++
		case a[i] > b[j]:
			dst = append(dst, b[j])
			j++
		default:
			dst = append(dst, a[i])
			i++
			j++
		}
	}
	dst = append(dst, a[i:]...)
	return append(dst, b[j:]...)
}

// subtractInto is a minus b.
func subtractInto(dst, a, b []uint64) []uint64 {
	dst = dst[:0]
	j := 0
	for _, v := range a {
		for j < len(b) && b[j] < v {
			j++
		}
		if j < len(b) && b[j] == v {
			continue
		}
		dst = append(dst, v)
	}
	return dst
}

// folder accumulates a running union or intersection of sorted lists with
// two ping-pong buffers, so that a reused folder does not allocate.
type folder struct {
	acc, tmp []uint64
	started  bool
}

func (f *folder) reset() { f.acc, f.started = f.acc[:0], false }

// intersect folds s (sorted, duplicate-free) into the running intersection.
func (f *folder) intersect(s []uint64) {
	if !f.started {
		f.acc, f.started = append(f.acc[:0], s...), true
		return
	}
	f.tmp = intersectInto(f.tmp, f.acc, s)
	f.acc, f.tmp = f.tmp, f.acc
}

// union folds s (sorted, duplicate-free) into the running union.
func (f *folder) union(s []uint64) {
	f.started = true
	f.tmp = unionInto(f.tmp, f.acc, s)
	f.acc, f.tmp = f.tmp, f.acc
}
