package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
)

// wireSamples is one valid message of each kind (and a few variants).
func wireSamples() []struct {
	h       Header
	payload []byte
} {
	info := AppendRequestInfo(nil, []uint32{7, 3, 1 << 31})
	frag := bytes.Repeat([]byte{0xab, 0x01, 0x7f}, 100)
	return []struct {
		h       Header
		payload []byte
	}{
		{Header{Kind: KindRequestInfo, RequestID: 42, Sender: 3, LayerHi: 32, HeadLo: 2, HeadHi: 4, BlockCount: 3}, info},
		{Header{Kind: KindRequestInfo, Flags: FlagPayloadCRC, RequestID: 1<<64 - 1, Sender: 1<<31 - 1, BlockCount: 3}, info},
		{Header{Kind: KindFragment, Flags: FlagPayloadCRC, RequestID: 42, Fragment: 9, Sender: 0, LayerLo: 8, LayerHi: 16,
			HeadLo: 0, HeadHi: 8, BlockMod: 2, BlockRem: 1, BlockCount: 12}, frag},
		{Header{Kind: KindFragment, RequestID: 42, Fragment: 1<<32 - 1, LayerLo: 65535, LayerHi: 65535}, frag},
		{Header{Kind: KindFragment, RequestID: 5}, nil},
		{Header{Kind: KindAck, RequestID: 42, Sender: 2}, nil},
		{Header{Kind: KindCancel, RequestID: 42, Sender: 2}, nil},
		{Header{Kind: KindCancelAck, RequestID: 42, Status: CodeInFlight}, nil},
		{Header{Kind: KindCancelAck, RequestID: 42, Status: CodeOK}, nil},
		{Header{Kind: KindError, RequestID: 42, Status: CodeVerify, Flags: FlagPayloadCRC}, []byte("block 3 layer 2 head 1: byte 17 differs")},
		{Header{Kind: KindError, RequestID: 7, Status: CodeNoSpace}, nil},
	}
}

func TestWireRoundTrip(t *testing.T) {
	for i, s := range wireSamples() {
		prefix := []byte("prefix")
		msg := EncodeMessage(prefix, s.h, s.payload)
		if !bytes.Equal(msg[:len(prefix)], prefix) {
			t.Fatalf("sample %d: EncodeMessage clobbered dst", i)
		}
		msg = msg[len(prefix):]
		if len(msg) != HeaderSize+len(s.payload) {
			t.Fatalf("sample %d: %d bytes, want %d", i, len(msg), HeaderSize+len(s.payload))
		}
		h, payload, err := DecodeMessage(msg)
		if err != nil {
			t.Fatalf("sample %d (%s): %v", i, s.h.Kind, err)
		}
		want := s.h
		want.PayloadLen = uint32(len(s.payload))
		if s.h.Flags&FlagPayloadCRC != 0 {
			want.PayloadCRC = crc32.Checksum(s.payload, crc32.MakeTable(crc32.Castagnoli))
			if want.PayloadCRC == 0 && len(s.payload) > 0 {
				t.Fatalf("sample %d: zero checksum", i)
			}
		}
		if h != want {
			t.Errorf("sample %d: decoded %+v\nwant %+v", i, h, want)
		}
		if !bytes.Equal(payload, s.payload) {
			t.Errorf("sample %d: payload differs", i)
		}
		// Canonical: re-encoding the decoded message gives the same bytes.
		if again := EncodeMessage(nil, h, payload); !bytes.Equal(again, msg) {
			t.Errorf("sample %d: re-encoding differs", i)
		}
	}
}

func TestWireLayout(t *testing.T) {
	h := Header{Kind: KindFragment, Flags: FlagPayloadCRC, RequestID: 0x0102030405060708, Fragment: 0x11223344,
		Sender: 5, LayerLo: 1, LayerHi: 2, HeadLo: 3, HeadHi: 4, BlockMod: 6, BlockRem: 5, BlockCount: 0xaabbccdd}
	msg := EncodeMessage(nil, h, []byte{1, 2, 3})
	le := binary.LittleEndian
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"magic", uint64(le.Uint32(msg[0:])), uint64(le.Uint32([]byte("RRKV")))},
		{"version", uint64(msg[4]), 2},
		{"kind", uint64(msg[5]), uint64(KindFragment)},
		{"flags", uint64(le.Uint16(msg[6:])), 1},
		{"request", le.Uint64(msg[8:]), 0x0102030405060708},
		{"fragment", uint64(le.Uint32(msg[16:])), 0x11223344},
		{"sender", uint64(le.Uint32(msg[20:])), 5},
		{"layers", uint64(le.Uint32(msg[24:])), 2<<16 | 1},
		{"heads", uint64(le.Uint32(msg[28:])), 4<<16 | 3},
		{"block mod/rem", uint64(le.Uint32(msg[32:])), 5<<16 | 6},
		{"block count", uint64(le.Uint32(msg[36:])), 0xaabbccdd},
		{"payload len", uint64(le.Uint32(msg[44:])), 3},
	} {
		if c.got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if HeaderSize != 64 {
		t.Errorf("HeaderSize %d", HeaderSize)
	}
	d := EncodeMessage(nil, Header{Kind: KindDigest, RequestID: 7, Digest: 0x0102030405060708}, nil)
	if got := le.Uint64(d[52:]); got != 0x0102030405060708 {
		t.Errorf("digest: %#x, want %#x", got, 0x0102030405060708)
	}
}

// reseal recomputes the header checksum after a test edited the header.
func reseal(msg []byte) []byte {
	binary.LittleEndian.PutUint32(msg[offHeaderCRC:], headerCRC(msg))
	return msg
}

func TestDecodeMessageErrors(t *testing.T) {
	le := binary.LittleEndian
	valid := func() []byte {
		return EncodeMessage(nil, Header{Kind: KindFragment, Flags: FlagPayloadCRC, RequestID: 9, LayerHi: 4, HeadHi: 2}, []byte("kv-bytes"))
	}
	for _, tc := range []struct {
		name string
		msg  func() []byte
		want string
	}{
		{"empty", func() []byte { return nil }, "truncated header: need 64 bytes, have 0"},
		{"truncated header", func() []byte { return valid()[:63] }, "truncated header: need 64 bytes, have 63"},
		{"bad magic", func() []byte { m := valid(); m[0] = 'X'; return m }, `bad magic "XRKV"`},
		{"unknown version", func() []byte { m := valid(); m[offVersion] = 1; return m }, "unknown version 1"},
		{"header checksum", func() []byte { m := valid(); m[offRequest]++; return m }, "header checksum mismatch"},
		{"header checksum field", func() []byte { m := valid(); m[offHeaderCRC] ^= 1; return m }, "header checksum mismatch"},
		{"unknown kind 0", func() []byte { m := valid(); m[offKind] = 0; return reseal(m) }, "unknown kind 0"},
		{"unknown kind 9", func() []byte { m := valid(); m[offKind] = 9; return reseal(m) }, "unknown kind 9"},
		{"unknown flags", func() []byte { m := valid(); le.PutUint16(m[offFlags:], 0x8001); return reseal(m) }, "unknown flags 0x8000"},
		{"negative sender", func() []byte { m := valid(); le.PutUint32(m[offSender:], 0xffffffff); return reseal(m) }, "sender rank -1 is negative"},
		{"layer lo > hi", func() []byte { m := valid(); le.PutUint16(m[offLayerLo:], 5); return reseal(m) }, "layer range lo 5 > hi 4"},
		{"head lo > hi", func() []byte { m := valid(); le.PutUint16(m[offHeadLo:], 3); return reseal(m) }, "head range lo 3 > hi 2"},
		{"block rem without mod", func() []byte { m := valid(); le.PutUint16(m[offBlockRem:], 1); return reseal(m) }, "block rem 1 with mod 0"},
		{"block rem >= mod", func() []byte {
			m := valid()
			le.PutUint16(m[offBlockMod:], 2)
			le.PutUint16(m[offBlockRem:], 2)
			return reseal(m)
		}, "block rem 2 >= mod 2"},
		{"unknown status", func() []byte { m := valid(); le.PutUint16(m[offStatus:], 99); return reseal(m) }, "unknown status 99"},
		{"error with status OK", func() []byte { m := valid(); m[offKind] = byte(KindError); return reseal(m) }, "Error message with status OK"},
		{"reserved 1", func() []byte { m := valid(); m[offReserved1] = 1; return reseal(m) }, "reserved header bytes are not zero"},
		{"digest outside a digest message", func() []byte { m := valid(); m[offDigest+7] = 1; return reseal(m) }, "a digest in a Fragment message"},
		{"digest-follows outside a fragment", func() []byte {
			m := valid()
			m[offKind] = byte(KindAck)
			le.PutUint16(m[offFlags:], uint16(FlagPayloadCRC|FlagDigestFollows))
			return reseal(m)
		}, "digest-follows flag on a Ack message"},
		{"crc without flag", func() []byte { m := valid(); le.PutUint16(m[offFlags:], 0); return reseal(m) }, "payload checksum 0x"},
		{"payload shorter", func() []byte { m := valid(); return m[:len(m)-1] }, "payload length 8 but 7 bytes follow the header"},
		{"payload longer", func() []byte { return append(valid(), 0) }, "payload length 8 but 9 bytes follow the header"},
		{"no payload", func() []byte { return valid()[:HeaderSize] }, "payload length 8 but 0 bytes follow the header"},
		{"payload checksum", func() []byte { m := valid(); m[HeaderSize+2] ^= 0x40; return m }, "payload checksum mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, payload, err := DecodeMessage(tc.msg())
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want an error wrapping ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if h != (Header{}) || payload != nil {
				t.Errorf("returned %+v and %d payload bytes with an error", h, len(payload))
			}
		})
	}
}

func TestHeaderPut(t *testing.T) {
	var buf [HeaderSize]byte
	h := Header{Kind: KindAck, RequestID: 3}
	if err := h.Put(buf[:HeaderSize-1]); err == nil || !strings.Contains(err.Error(), "need 64") {
		t.Errorf("short buffer: %v", err)
	}
	bad := Header{Kind: KindAck, HeadLo: 2, HeadHi: 1}
	if err := bad.Put(buf[:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("invalid header: %v", err)
	}
	if err := h.Put(buf[:]); err != nil {
		t.Fatal(err)
	}
	got, payload, err := DecodeMessage(buf[:])
	if err != nil || got != h || len(payload) != 0 {
		t.Fatalf("decode of Put: %+v %v %v", got, payload, err)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = h.Put(buf[:]) }); allocs != 0 {
		t.Errorf("Put allocates %.1f times", allocs)
	}
}

func TestEncodeMessagePanicsOnInvalidHeader(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "unknown kind 0") {
			t.Errorf("recovered %v", r)
		}
	}()
	EncodeMessage(nil, Header{}, nil)
}

func TestRequestInfo(t *testing.T) {
	for _, blocks := range [][]uint32{{}, {0}, {1, 2, 3, 1<<32 - 1}} {
		p := AppendRequestInfo(nil, blocks)
		got, err := DecodeRequestInfo(p, make([]uint32, 5))
		if err != nil {
			t.Fatalf("%v: %v", blocks, err)
		}
		if !reflect.DeepEqual(got, blocks) && !(len(got) == 0 && len(blocks) == 0) {
			t.Errorf("got %v, want %v", got, blocks)
		}
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "need 4 bytes for the block count, have 0"},
		{"short count", []byte{1, 0}, "need 4 bytes for the block count, have 2"},
		{"short ids", AppendRequestInfo(nil, []uint32{1, 2})[:10], "with 2 blocks needs 12 bytes, have 10"},
		{"trailing bytes", append(AppendRequestInfo(nil, []uint32{1}), 0), "with 1 blocks needs 8 bytes, have 9"},
		{"huge count", []byte{0xff, 0xff, 0xff, 0xff}, "with 4294967295 blocks needs 17179869184 bytes, have 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRequestInfo(tc.payload, nil)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrMalformed saying %q", err, tc.want)
			}
		})
	}
}

func TestWireStrings(t *testing.T) {
	for k, want := range map[Kind]string{KindRequestInfo: "RequestInfo", KindFragment: "Fragment", KindAck: "Ack",
		KindCancel: "Cancel", KindCancelAck: "CancelAck", KindError: "Error", 0: "Kind(0)", 200: "Kind(200)"} {
		if k.String() != want {
			t.Errorf("%d: %q, want %q", uint8(k), k, want)
		}
	}
	for s, want := range map[StatusCode]string{CodeOK: "OK", CodeUnknownRequest: "UnknownRequest", CodeDuplicate: "Duplicate",
		CodeFinished: "Finished", CodeNoSpace: "NoSpace", CodeVerify: "Verify", CodeCancelled: "Cancelled",
		CodeInFlight: "InFlight", CodeFailed: "Failed", 1000: "StatusCode(1000)"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", uint16(s), s, want)
		}
	}
}

// FuzzDecodeMessage: no input panics; whatever decodes re-encodes to the
// same bytes (so decode(encode(x)) == x for every valid x); a decoded
// RequestInfo payload likewise round-trips.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range wireSamples() {
		f.Add(EncodeMessage(nil, s.h, s.payload))
	}
	f.Add([]byte{})
	f.Add([]byte("RRKV"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, payload, err := DecodeMessage(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again := EncodeMessage(nil, h, payload)
		if !bytes.Equal(again, msg) {
			t.Fatalf("decoded %+v re-encodes differently", h)
		}
		h2, p2, err := DecodeMessage(again)
		if err != nil || h2 != h || !bytes.Equal(p2, payload) {
			t.Fatalf("second decode: %+v %v", h2, err)
		}
		if h.Kind == KindRequestInfo {
			blocks, err := DecodeRequestInfo(payload, nil)
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("request info error %v does not wrap ErrMalformed", err)
				}
				return
			}
			if !bytes.Equal(AppendRequestInfo(nil, blocks), payload) {
				t.Fatalf("request info %v re-encodes differently", blocks)
			}
		}
	})
}

func BenchmarkWireFragment(b *testing.B) {
	payload := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 1<<17) // 1 MiB
	for _, tc := range []struct {
		name  string
		flags Flags
	}{{"crc=off", 0}, {"crc=on", FlagPayloadCRC}} {
		h := Header{Kind: KindFragment, Flags: tc.flags, RequestID: 1, LayerHi: 32, HeadHi: 8, BlockCount: 16}
		buf := make([]byte, 0, HeaderSize+len(payload))
		b.Run("encode/"+tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				buf = EncodeMessage(buf[:0], h, payload)
			}
		})
		msg := EncodeMessage(nil, h, payload)
		b.Run("decode/"+tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := DecodeMessage(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzWireRoundTrip builds headers from arbitrary field values: a header
// that validates round-trips exactly, one that does not is refused by Put.
func FuzzWireRoundTrip(f *testing.F) {
	for _, s := range wireSamples() {
		h := s.h
		f.Add(uint8(h.Kind), uint16(h.Flags), h.RequestID, h.Fragment, h.Sender, h.LayerLo, h.LayerHi,
			h.HeadLo, h.HeadHi, h.BlockMod, h.BlockRem, h.BlockCount, uint16(h.Status), s.payload)
	}
	f.Fuzz(func(t *testing.T, kind uint8, flags uint16, req uint64, frag uint32, sender int32, l0, l1, h0, h1, mod, rem uint16,
		count uint32, status uint16, payload []byte) {
		h := Header{Kind: Kind(kind), Flags: Flags(flags), RequestID: req, Fragment: frag, Sender: sender,
			LayerLo: l0, LayerHi: l1, HeadLo: h0, HeadHi: h1, BlockMod: mod, BlockRem: rem, BlockCount: count, Status: StatusCode(status)}
		var buf [HeaderSize]byte
		if err := h.Validate(); err != nil {
			if !errors.Is(err, ErrMalformed) || h.Put(buf[:]) == nil {
				t.Fatalf("invalid header %+v: Validate %v, but Put accepted it", h, err)
			}
			return
		}
		msg := EncodeMessage(nil, h, payload)
		got, p, err := DecodeMessage(msg)
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		h.PayloadLen, h.PayloadCRC = got.PayloadLen, got.PayloadCRC
		if got != h || !bytes.Equal(p, payload) || int(got.PayloadLen) != len(payload) {
			t.Fatalf("decoded %+v, want %+v", got, h)
		}
	})
}
