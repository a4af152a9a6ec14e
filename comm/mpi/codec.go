package mpi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/rankrun/rankrun/comm/flight"
)

// The stall inspector's reply: how many collectives the rank has entered on
// the communicator it was asked about, whether its program has returned
// (it is in Finalize), and its flight records, as a small length-prefixed
// encoding (no reflection, no allocation beyond the output):
//
//	"RRI4" nonce:varint entered:uvarint returned:byte count:uvarint record* pending:guards
//	record = group:str seq:uvarint kind:byte site:str peer:varint tag:varint
//	         start:varint end:varint err:str guards (times in Unix ns, 0 = zero)
//	guards = count:uvarint (name:str value:varint bool:byte site:str)*
//	str    = len:uvarint bytes
//
// It is kept free of cgo so that it builds, and is fuzzed, without MPI.

var replyMagic = []byte("RRI4")

// maxReplyRecords bounds the record count a decoder accepts.
const maxReplyRecords = 1 << 16

var errBadReply = errors.New("mpi: malformed inspection reply")

// reply is a decoded inspection reply.
type reply struct {
	nonce   int64
	entered uint64 // collectives entered on the inspected communicator
	// returned: the rank's program has returned; it enters nothing more.
	returned bool
	recs     []flight.OpRecord
	pending  []flight.GuardValue // recorded since the rank's last collective
}

func encodeReply(rp reply) []byte {
	b := make([]byte, 0, 64+len(rp.recs)*96)
	b = append(b, replyMagic...)
	b = binary.AppendVarint(b, rp.nonce)
	b = binary.AppendUvarint(b, rp.entered)
	b = append(b, boolByte(rp.returned))
	b = binary.AppendUvarint(b, uint64(len(rp.recs)))
	for _, r := range rp.recs {
		b = appendString(b, r.Group)
		b = binary.AppendUvarint(b, r.Seq)
		b = append(b, byte(r.Kind))
		b = appendString(b, r.Site)
		b = binary.AppendVarint(b, int64(r.Peer))
		b = binary.AppendVarint(b, int64(r.Tag))
		b = binary.AppendVarint(b, unixNano(r.Start))
		b = binary.AppendVarint(b, unixNano(r.End))
		b = appendString(b, r.Err)
		b = appendGuards(b, r.Guards)
	}
	return appendGuards(b, rp.pending)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func appendGuards(b []byte, gs []flight.GuardValue) []byte {
	b = binary.AppendUvarint(b, uint64(len(gs)))
	for _, g := range gs {
		b = appendString(b, g.Name)
		b = binary.AppendVarint(b, g.Value)
		b = append(b, boolByte(g.Bool))
		b = appendString(b, g.Site)
	}
	return b
}

// guards reads what appendGuards wrote.
func (r *replyReader) guards() []flight.GuardValue {
	n := r.uvarint("guard count")
	if r.err != nil {
		return nil
	}
	// Every guard takes at least 4 bytes.
	if n > flight.MaxGuards || n > uint64(len(r.b))/4 {
		r.fail("guard count")
		return nil
	}
	var out []flight.GuardValue
	for range n {
		g := flight.GuardValue{Name: r.str("guard name"), Value: r.varint("guard value")}
		g.Bool = r.byte1("guard flag") == 1
		g.Site = r.str("guard site")
		if r.err != nil {
			return nil
		}
		out = append(out, g)
	}
	return out
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

type replyReader struct {
	b   []byte
	err error
}

func (r *replyReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s", errBadReply, what)
	}
}

func (r *replyReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *replyReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *replyReader) str(what string) string {
	n := r.uvarint(what + " length")
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.fail(what)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *replyReader) byte1(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail(what)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func decodeReply(b []byte) (reply, error) {
	if len(b) < len(replyMagic) || string(b[:len(replyMagic)]) != string(replyMagic) {
		return reply{}, fmt.Errorf("%w: bad magic", errBadReply)
	}
	r := &replyReader{b: b[len(replyMagic):]}
	nonce := r.varint("nonce")
	entered := r.uvarint("entered count")
	returned := r.byte1("returned flag")
	count := r.uvarint("record count")
	if r.err != nil {
		return reply{}, r.err
	}
	if returned > 1 {
		return reply{}, fmt.Errorf("%w: returned flag %d, want 0 or 1", errBadReply, returned)
	}
	// Every record takes at least 11 bytes: refuse counts the input cannot hold.
	if count > maxReplyRecords || count > uint64(len(r.b))/11 {
		return reply{}, fmt.Errorf("%w: record count %d too large for %d bytes", errBadReply, count, len(r.b))
	}
	recs := make([]flight.OpRecord, 0, count)
	for range count {
		var o flight.OpRecord
		o.Group = r.str("group")
		o.Seq = r.uvarint("seq")
		o.Kind = flight.Kind(r.byte1("kind"))
		o.Site = r.str("site")
		o.Peer = int(r.varint("peer"))
		o.Tag = int(r.varint("tag"))
		o.Start = fromUnixNano(r.varint("start"))
		o.End = fromUnixNano(r.varint("end"))
		o.Err = r.str("err")
		o.Guards = r.guards()
		if r.err != nil {
			return reply{}, r.err
		}
		recs = append(recs, o)
	}
	pending := r.guards()
	if r.err != nil {
		return reply{}, r.err
	}
	if len(r.b) != 0 {
		return reply{}, fmt.Errorf("%w: %d trailing bytes", errBadReply, len(r.b))
	}
	return reply{nonce: nonce, entered: entered, returned: returned == 1, recs: recs, pending: pending}, nil
}
