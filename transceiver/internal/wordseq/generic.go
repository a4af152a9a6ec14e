package wordseq

// The plain loops: every platform's fallback, and the reference the
// vector loops are tested against. Each takes buffers already cut to
// n*len(seeds) words.

func fillGeneric(dst []uint64, n int, seeds []uint64, step uint64) {
	for i, w := range seeds {
		seg := dst[i*n : i*n+n]
		for k := range seg {
			seg[k] = w
			w += step
		}
	}
}

func checkGeneric(src []uint64, n int, seeds []uint64, step uint64) bool {
	var bad uint64
	for i, w := range seeds {
		for _, v := range src[i*n : i*n+n] {
			bad |= v ^ w
			w += step
		}
	}
	return bad == 0
}

// copyCheckGeneric ORs every word's difference from the pattern and tests
// the sum once: no branch in the loop. (The plain loop measured faster
// than 2- and 4-way unrolled ones, which spill registers.)
func copyCheckGeneric(dst, src []uint64, n int, seeds []uint64, step uint64) bool {
	var bad uint64
	for i, w := range seeds {
		d, s := dst[i*n:i*n+n], src[i*n:i*n+n]
		d = d[:len(s)] // one bounds check, not one a word
		for k, v := range s {
			d[k] = v
			bad |= v ^ w
			w += step
		}
	}
	return bad == 0
}
