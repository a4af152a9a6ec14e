package wire

// The transfer wire format between CTX and GEN ranks (DESIGN.md §5).
//
// A message is a fixed 64-byte header followed by PayloadLen bytes of
// payload, and nothing else. All integers are little-endian:
//
//	off size field
//	  0    4 magic "RRKV"
//	  4    1 version (WireVersion)
//	  5    1 kind (Kind)
//	  6    2 flags (Flags; unknown bits rejected)
//	  8    8 request id
//	 16    4 fragment index
//	 20    4 sender rank (int32, >= 0)
//	 24    2 layer lo   26 2 layer hi    half-open [lo, hi), lo <= hi
//	 28    2 head lo    30 2 head hi     half-open [lo, hi), lo <= hi
//	 32    2 block mod  34 2 block rem   rem < mod, or both 0
//	 36    4 block count
//	 40    2 status (StatusCode)
//	 42    2 reserved, zero
//	 44    4 payload length (exactly the bytes that follow the header)
//	 48    4 payload CRC-32C (zero unless FlagPayloadCRC)
//	 52    8 payload digest (Digest messages only; zero otherwise)
//	 60    4 header CRC-32C over bytes 0..63 with this field zeroed
//
// Version 2 added the digest field (bytes 52..59, reserved in version 1)
// and the Digest kind: --verify checksum sends a fragment's xxh3 digest
// after the fragment (FlagDigestFollows), so the sender hashes while the
// bytes travel instead of before it sends them.
//
// The encoding is canonical: a message that decodes re-encodes to the same
// bytes.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// ErrMalformed is wrapped by every error of DecodeMessage and
// DecodeRequestInfo; the message names what was wrong.
var ErrMalformed = errors.New("transceiver: malformed message")

// HeaderSize is the size of the fixed header that starts every message.
const HeaderSize = 64

// WireVersion is the version this code writes and the only one it reads.
const WireVersion = 2

var wireMagic = [4]byte{'R', 'R', 'K', 'V'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header field offsets.
const (
	offMagic      = 0
	offVersion    = 4
	offKind       = 5
	offFlags      = 6
	offRequest    = 8
	offFragment   = 16
	offSender     = 20
	offLayerLo    = 24
	offLayerHi    = 26
	offHeadLo     = 28
	offHeadHi     = 30
	offBlockMod   = 32
	offBlockRem   = 34
	offBlockCount = 36
	offStatus     = 40
	offReserved1  = 42
	offPayloadLen = 44
	offPayloadCRC = 48
	offDigest     = 52
	offHeaderCRC  = 60
)

// Kind is the type of a message.
type Kind uint8

// Message kinds. The zero Kind is invalid.
const (
	KindRequestInfo Kind = iota + 1 // GEN -> CTX: request id, GEN rank, destination block ids
	KindFragment                    // CTX -> GEN: KV bytes for a layer/head/block range
	KindAck                         // GEN -> CTX: fragments received and verified
	KindCancel                      // either way: give up the transfer of a request
	KindCancelAck                   // reply to Cancel; Status says accepted (OK) or why not
	KindError                       // either way: Status names the error (never OK)
	KindDigest                      // CTX -> GEN: the digest of a fragment sent before it (FlagDigestFollows)
	KindSending                     // CTX -> GEN: the fragment's bytes are on their way (backends without completion events)
)

func (k Kind) String() string {
	switch k {
	case KindRequestInfo:
		return "RequestInfo"
	case KindFragment:
		return "Fragment"
	case KindAck:
		return "Ack"
	case KindCancel:
		return "Cancel"
	case KindCancelAck:
		return "CancelAck"
	case KindError:
		return "Error"
	case KindDigest:
		return "Digest"
	case KindSending:
		return "Sending"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Valid reports whether k is a defined kind.
func (k Kind) Valid() bool { return k >= KindRequestInfo && k <= KindSending }

// Flags are the header's option bits.
type Flags uint16

// The flags.
const (
	// FlagPayloadCRC: the header carries a CRC-32C of the payload.
	FlagPayloadCRC Flags = 1 << 0
	// FlagDigestFollows (fragments): a Digest message for this fragment
	// follows it, with the same request, sender and ranges.
	FlagDigestFollows Flags = 1 << 1
)

const knownFlags = FlagPayloadCRC | FlagDigestFollows

// StatusCode is a message's status: CodeOK or an error code.
type StatusCode uint16

// Status codes.
const (
	CodeOK             StatusCode = iota // success
	CodeUnknownRequest                   // no session for the request id
	CodeDuplicate                        // the fragment or request info was seen already
	CodeFinished                         // the session is already terminal
	CodeNoSpace                          // no room for the blocks or the fragment
	CodeVerify                           // received bytes failed verification
	CodeCancelled                        // the transfer was cancelled
	CodeInFlight                         // cancel refused: a write is in flight, retry
	CodeFailed                           // Cancel / CancelAck: the transfer failed on the sender's side (not a cancel)
)

func (s StatusCode) String() string {
	switch s {
	case CodeOK:
		return "OK"
	case CodeUnknownRequest:
		return "UnknownRequest"
	case CodeDuplicate:
		return "Duplicate"
	case CodeFinished:
		return "Finished"
	case CodeNoSpace:
		return "NoSpace"
	case CodeVerify:
		return "Verify"
	case CodeCancelled:
		return "Cancelled"
	case CodeInFlight:
		return "InFlight"
	case CodeFailed:
		return "Failed"
	}
	return fmt.Sprintf("StatusCode(%d)", uint16(s))
}

// Valid reports whether s is a defined status code.
func (s StatusCode) Valid() bool { return s <= CodeFailed }

// Header is the fixed-size header of a message. The magic, version and
// header checksum are not fields: Put writes them and DecodeMessage checks
// them.
type Header struct {
	Kind       Kind
	Flags      Flags
	RequestID  uint64
	Fragment   uint32 // fragment index within the request
	Sender     int32  // rank of the sender in its instance, >= 0
	LayerLo    uint16 // layers [LayerLo, LayerHi)
	LayerHi    uint16
	HeadLo     uint16 // KV heads [HeadLo, HeadHi)
	HeadHi     uint16
	BlockMod   uint16 // blocks i with i % BlockMod == BlockRem (0, 0: all)
	BlockRem   uint16
	BlockCount uint32
	Status     StatusCode
	PayloadLen uint32 // set by EncodeMessage
	PayloadCRC uint32 // set by EncodeMessage when Flags has FlagPayloadCRC
	Digest     uint64 // KindDigest: the fragment's payload digest (FragmentDigest)
}

// Validate reports the first rule h breaks, wrapping ErrMalformed; nil for
// a header that Put will write and DecodeMessage accept.
func (h *Header) Validate() error {
	switch {
	case !h.Kind.Valid():
		return fmt.Errorf("%w: unknown kind %d", ErrMalformed, uint8(h.Kind))
	case h.Flags&^knownFlags != 0:
		return fmt.Errorf("%w: unknown flags %#04x", ErrMalformed, uint16(h.Flags&^knownFlags))
	case h.Sender < 0:
		return fmt.Errorf("%w: sender rank %d is negative", ErrMalformed, h.Sender)
	case h.LayerLo > h.LayerHi:
		return fmt.Errorf("%w: layer range lo %d > hi %d", ErrMalformed, h.LayerLo, h.LayerHi)
	case h.HeadLo > h.HeadHi:
		return fmt.Errorf("%w: head range lo %d > hi %d", ErrMalformed, h.HeadLo, h.HeadHi)
	case h.BlockMod == 0 && h.BlockRem != 0:
		return fmt.Errorf("%w: block rem %d with mod 0", ErrMalformed, h.BlockRem)
	case h.BlockMod != 0 && h.BlockRem >= h.BlockMod:
		return fmt.Errorf("%w: block rem %d >= mod %d", ErrMalformed, h.BlockRem, h.BlockMod)
	case !h.Status.Valid():
		return fmt.Errorf("%w: unknown status %d", ErrMalformed, uint16(h.Status))
	case h.Kind == KindError && h.Status == CodeOK:
		return fmt.Errorf("%w: %s message with status OK", ErrMalformed, h.Kind)
	case h.Flags&FlagPayloadCRC == 0 && h.PayloadCRC != 0:
		return fmt.Errorf("%w: payload checksum %#08x without its flag", ErrMalformed, h.PayloadCRC)
	case h.Kind != KindDigest && h.Digest != 0:
		return fmt.Errorf("%w: a digest in a %s message", ErrMalformed, h.Kind)
	case h.Kind != KindFragment && h.Flags&FlagDigestFollows != 0:
		return fmt.Errorf("%w: digest-follows flag on a %s message", ErrMalformed, h.Kind)
	}
	return nil
}

// Put validates h and writes it, with magic, version and header checksum,
// into buf[:HeaderSize]. It does not allocate. PayloadLen and PayloadCRC
// are written as they are (EncodeMessage sets them).
func (h *Header) Put(buf []byte) error {
	if len(buf) < HeaderSize {
		return fmt.Errorf("transceiver: header buffer of %d bytes, need %d", len(buf), HeaderSize)
	}
	if err := h.Validate(); err != nil {
		return err
	}
	b := buf[:HeaderSize]
	le := binary.LittleEndian
	copy(b[offMagic:], wireMagic[:])
	b[offVersion] = WireVersion
	b[offKind] = byte(h.Kind)
	le.PutUint16(b[offFlags:], uint16(h.Flags))
	le.PutUint64(b[offRequest:], h.RequestID)
	le.PutUint32(b[offFragment:], h.Fragment)
	le.PutUint32(b[offSender:], uint32(h.Sender))
	le.PutUint16(b[offLayerLo:], h.LayerLo)
	le.PutUint16(b[offLayerHi:], h.LayerHi)
	le.PutUint16(b[offHeadLo:], h.HeadLo)
	le.PutUint16(b[offHeadHi:], h.HeadHi)
	le.PutUint16(b[offBlockMod:], h.BlockMod)
	le.PutUint16(b[offBlockRem:], h.BlockRem)
	le.PutUint32(b[offBlockCount:], h.BlockCount)
	le.PutUint16(b[offStatus:], uint16(h.Status))
	le.PutUint16(b[offReserved1:], 0)
	le.PutUint32(b[offPayloadLen:], h.PayloadLen)
	le.PutUint32(b[offPayloadCRC:], h.PayloadCRC)
	le.PutUint64(b[offDigest:], h.Digest)
	le.PutUint32(b[offHeaderCRC:], headerCRC(b))
	return nil
}

// headerCRC is the CRC-32C of b[:HeaderSize] with the checksum field
// taken as zero.
func headerCRC(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[:offHeaderCRC])
	return crc32.Update(c, castagnoli, zeroCRCField[:])
}

// zeroCRCField stands in for the checksum field; a package variable, since
// a local array would escape through crc32's indirect call and allocate.
var zeroCRCField [4]byte

// EncodeMessage appends the message (header, then payload) to dst and
// returns the extended slice; it allocates only when dst lacks capacity.
// It sets h.PayloadLen, and h.PayloadCRC when h.Flags has FlagPayloadCRC.
//
// An invalid header (see Validate) or a payload over 4 GiB - 1 is a bug in
// the sender, and EncodeMessage panics rather than put a message on the
// wire that the peer must reject.
func EncodeMessage(dst []byte, h Header, payload []byte) []byte {
	if uint64(len(payload)) > math.MaxUint32 {
		panic(fmt.Sprintf("transceiver: EncodeMessage: payload of %d bytes exceeds the 32-bit length", len(payload)))
	}
	h.PayloadLen = uint32(len(payload))
	h.PayloadCRC = 0
	if h.Flags&FlagPayloadCRC != 0 {
		h.PayloadCRC = crc32.Checksum(payload, castagnoli)
	}
	n := len(dst)
	dst = slices.Grow(dst, HeaderSize+len(payload))[:n+HeaderSize]
	if err := h.Put(dst[n:]); err != nil {
		panic("transceiver: EncodeMessage: " + err.Error())
	}
	return append(dst, payload...)
}

// DecodeHeader decodes and validates the header at the start of msg
// without looking at what follows it (DecodeMessage checks the payload's
// length and checksum; a receiver that checks them while copying the
// payload elsewhere calls this).
func DecodeHeader(msg []byte) (Header, error) {
	var h Header
	if len(msg) < HeaderSize {
		return h, fmt.Errorf("%w: truncated header: need %d bytes, have %d", ErrMalformed, HeaderSize, len(msg))
	}
	b := msg[:HeaderSize]
	le := binary.LittleEndian
	if [4]byte(b[offMagic:offMagic+4]) != wireMagic {
		return h, fmt.Errorf("%w: bad magic %q, want %q", ErrMalformed, b[offMagic:offMagic+4], wireMagic[:])
	}
	if v := b[offVersion]; v != WireVersion {
		return h, fmt.Errorf("%w: unknown version %d (this build reads %d)", ErrMalformed, v, WireVersion)
	}
	if got, want := le.Uint32(b[offHeaderCRC:]), headerCRC(b); got != want {
		return h, fmt.Errorf("%w: header checksum mismatch: header says %#08x, computed %#08x", ErrMalformed, got, want)
	}
	if le.Uint16(b[offReserved1:]) != 0 {
		return h, fmt.Errorf("%w: reserved header bytes are not zero", ErrMalformed)
	}
	h = Header{
		Kind:       Kind(b[offKind]),
		Flags:      Flags(le.Uint16(b[offFlags:])),
		RequestID:  le.Uint64(b[offRequest:]),
		Fragment:   le.Uint32(b[offFragment:]),
		Sender:     int32(le.Uint32(b[offSender:])),
		LayerLo:    le.Uint16(b[offLayerLo:]),
		LayerHi:    le.Uint16(b[offLayerHi:]),
		HeadLo:     le.Uint16(b[offHeadLo:]),
		HeadHi:     le.Uint16(b[offHeadHi:]),
		BlockMod:   le.Uint16(b[offBlockMod:]),
		BlockRem:   le.Uint16(b[offBlockRem:]),
		BlockCount: le.Uint32(b[offBlockCount:]),
		Status:     StatusCode(le.Uint16(b[offStatus:])),
		PayloadLen: le.Uint32(b[offPayloadLen:]),
		PayloadCRC: le.Uint32(b[offPayloadCRC:]),
		Digest:     le.Uint64(b[offDigest:]),
	}
	if err := h.Validate(); err != nil {
		return Header{}, err
	}
	return h, nil
}

// DecodeMessage parses one whole message. It returns the header and the
// payload, a sub-slice of msg (not a copy). Every error wraps ErrMalformed
// and names the problem; no input makes it panic.
func DecodeMessage(msg []byte) (Header, []byte, error) {
	h, err := DecodeHeader(msg)
	if err != nil {
		return Header{}, nil, err
	}
	payload := msg[HeaderSize:]
	if uint64(h.PayloadLen) != uint64(len(payload)) {
		return Header{}, nil, fmt.Errorf("%w: payload length %d but %d bytes follow the header", ErrMalformed, h.PayloadLen, len(payload))
	}
	if h.Flags&FlagPayloadCRC != 0 {
		if got := crc32.Checksum(payload, castagnoli); got != h.PayloadCRC {
			return Header{}, nil, fmt.Errorf("%w: payload checksum mismatch: header says %#08x, computed %#08x over %d bytes",
				ErrMalformed, h.PayloadCRC, got, len(payload))
		}
	}
	return h, payload, nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// RequestInfo payload: a little-endian uint32 count, then count uint32
// destination block ids, and nothing else.

// AppendRequestInfo appends the RequestInfo payload for blocks to dst.
// More than 2^32-1 blocks is a bug in the caller and panics.
func AppendRequestInfo(dst []byte, blocks []uint32) []byte {
	if uint64(len(blocks)) > math.MaxUint32 {
		panic(fmt.Sprintf("transceiver: AppendRequestInfo: %d blocks exceed the 32-bit count", len(blocks)))
	}
	dst = slices.Grow(dst, 4+4*len(blocks))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(blocks)))
	for _, id := range blocks {
		dst = binary.LittleEndian.AppendUint32(dst, id)
	}
	return dst
}

// DecodeRequestInfo parses a RequestInfo payload, appending the block ids
// to dst[:0] (pass a reused slice to avoid allocating). Errors wrap
// ErrMalformed.
func DecodeRequestInfo(payload []byte, dst []uint32) ([]uint32, error) {
	if len(payload) < 4 {
		return dst[:0], fmt.Errorf("%w: request info truncated: need 4 bytes for the block count, have %d", ErrMalformed, len(payload))
	}
	n := binary.LittleEndian.Uint32(payload)
	if need := 4 + 4*uint64(n); need != uint64(len(payload)) {
		return dst[:0], fmt.Errorf("%w: request info with %d blocks needs %d bytes, have %d", ErrMalformed, n, need, len(payload))
	}
	dst = slices.Grow(dst[:0], int(n))
	for i := range int(n) {
		dst = append(dst, binary.LittleEndian.Uint32(payload[4+4*i:]))
	}
	return dst, nil
}
