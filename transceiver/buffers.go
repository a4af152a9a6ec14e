package transceiver

// bufPool recycles fragment message buffers by exact size. A buffer goes
// back only after the request that used it has completed (or was
// cancelled), never while a send or receive may still touch it. Owned by the
// transceiver's goroutine; not safe for concurrent use.
type bufPool struct {
	free  map[int][][]byte
	lists [][][]byte // part lists of lending sends, emptied
	bytes int        // bytes held
	limit int        // most bytes to hold
}

// defaultBufLimit bounds the bytes kept for reuse per transceiver.
const defaultBufLimit = 256 << 20

func (p *bufPool) get(n int) []byte {
	if l := p.free[n]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[n] = l[:len(l)-1]
		p.bytes -= cap(b)
		return b[:n]
	}
	return make([]byte, n)
}

func (p *bufPool) put(b []byte) {
	if b == nil || p.bytes+cap(b) > p.limit {
		return
	}
	if p.free == nil {
		p.free = map[int][][]byte{}
	}
	p.free[len(b)] = append(p.free[len(b)], b)
	p.bytes += cap(b)
}

// getParts returns an empty part list with room for n parts.
func (p *bufPool) getParts(n int) [][]byte {
	for i := len(p.lists) - 1; i >= 0; i-- {
		if l := p.lists[i]; cap(l) >= n {
			p.lists[i] = p.lists[len(p.lists)-1]
			p.lists = p.lists[:len(p.lists)-1]
			return l
		}
	}
	return make([][]byte, 0, n)
}

// putParts keeps l for reuse (at most a few lists), dropping its slices.
func (p *bufPool) putParts(l [][]byte) {
	if l == nil || len(p.lists) >= 16 {
		return
	}
	clear(l)
	p.lists = append(p.lists, l[:0])
}
