package transceiver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankrun/rankrun/topology"
)

// The word-at-a-time path and the byte path agree on every alignment and
// length, and a single flipped byte anywhere is caught.
func TestPatternFastPathMatchesBytePath(t *testing.T) {
	buf := make([]byte, 300)
	for off := range 9 {
		for _, n := range []int{0, 1, 7, 8, 9, 64, 127, 128, 130} {
			seg := buf[off : off+n]
			fillSegment(seg, 0xABCDEF)
			w := uint64(0xABCDEF)
			for i := 0; i < n; i++ {
				if i%8 == 0 && i > 0 {
					w += patternStep
				}
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], w)
				if seg[i] != b[i%8] {
					t.Fatalf("off %d len %d: byte %d is %#x, the pattern says %#x", off, n, i, seg[i], b[i%8])
				}
			}
			if !checkSegment(seg, 0xABCDEF) {
				t.Fatalf("off %d len %d: a filled segment does not check", off, n)
			}
			for i := range n {
				seg[i] ^= 0x10
				if checkSegment(seg, 0xABCDEF) {
					t.Fatalf("off %d len %d: flipped byte %d not caught", off, n, i)
				}
				seg[i] ^= 0x10
			}
		}
	}
}

// fillRef writes the pattern of one segment, token t of the block whose
// first token is token0, by its definition (Pattern): words from a mixed
// seed for a head of a word or more, a lane of the sampled grid for one
// shorter.
func fillRef(seg []byte, req uint64, layer int, kv topology.KV, head, tpb, token0, t int, grid bool) {
	if len(seg) >= 8 || !grid {
		fillSegment(seg, patternSeed(req, layer, kv, head, token0+t))
		return
	}
	v := shortLane(len(seg), req, layer, kv, head, tpb, token0, t)
	for i := range seg {
		seg[i] = byte(v >> (8 * i))
	}
}

// copyCheckRun copies a whole run and catches a flipped byte at every
// position, naming its head and token, and so does checkRun in place: on
// the word kernels (aligned; whole vectors, more tokens than one batch of
// seeds, and segments of 5 words, which the vector loops leave to Go) and
// the byte path (unaligned, or segments that are not whole words), and
// segments shorter than a word (runPatternShort).
func TestCopyCheckRunCatchesEveryByte(t *testing.T) {
	const req, layer, headLo, headHi, token0 = 7, 3, 2, 5, 8
	type shape struct {
		name   string
		hb     int
		offset int
		tpb    int
		grid   bool
	}
	shapes := []shape{{"words", 40, 0, 4, false}, {"vectors", 256, 0, 4, false}, {"batches", 64, 0, seedBatch + 6, false}, {"unaligned", 40, 3, 4, false}, {"odd-segment", 13, 0, 4, false}}
	for _, sh := range []shape{{"short", 2, 0, 4, false}, {"short-unaligned", 2, 3, 4, false}, {"short-chunks", 2, 0, 300, false}, {"short-odd", 3, 0, 200, false}, {"short-1", 1, 0, 600, false}, {"short-7", 7, 1, 100, false}} {
		// A short head holds the lane grid or, where it does not fit
		// one, a mixed value a segment (sampledGrid).
		shapes = append(shapes, sh)
		sh.name, sh.grid = sh.name+"-grid", true
		shapes = append(shapes, sh)
	}
	for _, tc := range shapes {
		t.Run(tc.name, func(t *testing.T) {
			tpb := tc.tpb
			n := (headHi - headLo) * tpb * tc.hb
			srcBuf := make([]byte, n+8)
			src := srcBuf[tc.offset : tc.offset+n]
			for h := headLo; h < headHi; h++ {
				for tok := range tpb {
					at := ((h-headLo)*tpb + tok) * tc.hb
					fillRef(src[at:at+tc.hb], req, layer, topology.V, h, tpb, token0, tok, tc.grid)
				}
			}
			filled := make([]byte, n+8)[tc.offset : tc.offset+n]
			if runPattern(opFill, filled, nil, tc.hb, req, layer, topology.V, headLo, headHi, tpb, token0, tc.grid); string(filled) != string(src) {
				t.Fatal("the run's fill differs from its segments filled one by one")
			}
			dst := make([]byte, n)
			if _, _, ok := copyCheckRun(dst, src, tc.hb, req, layer, topology.V, headLo, headHi, tpb, token0, tc.grid); !ok {
				t.Fatal("a run holding the pattern does not check")
			}
			if string(dst) != string(src) {
				t.Fatal("the run was not copied")
			}
			if _, _, ok := checkRun(src, tc.hb, req, layer, topology.V, headLo, headHi, tpb, token0, tc.grid); !ok {
				t.Fatal("a run holding the pattern does not check in place")
			}
			for i := range n {
				src[i] ^= 0x01
				head, tok, ok := copyCheckRun(dst, src, tc.hb, req, layer, topology.V, headLo, headHi, tpb, token0, tc.grid)
				ihead, itok, iok := checkRun(src, tc.hb, req, layer, topology.V, headLo, headHi, tpb, token0, tc.grid)
				copied := dst[i] == src[i]
				src[i] ^= 0x01
				seg := i / tc.hb
				if wantHead, wantTok := headLo+seg/tpb, seg%tpb; ok || head != wantHead || tok != wantTok {
					t.Fatalf("byte %d flipped: ok %v at head %d token %d, want a mismatch at head %d token %d", i, ok, head, tok, wantHead, wantTok)
				} else if iok || ihead != wantHead || itok != wantTok {
					t.Fatalf("byte %d flipped, in place: ok %v at head %d token %d, want a mismatch at head %d token %d", i, iok, ihead, itok, wantHead, wantTok)
				}
				if !copied {
					t.Fatalf("byte %d flipped: the copy left it out", i)
				}
			}
			// The right bytes under the wrong coordinates do not check.
			if _, _, ok := copyCheckRun(dst, src, tc.hb, req, layer, topology.K, headLo, headHi, tpb, token0, tc.grid); ok {
				t.Fatal("V bytes checked as K")
			}
			if _, _, ok := checkRun(src, tc.hb, req, layer, topology.V, headLo, headHi, tpb, token0+1, tc.grid); ok {
				t.Fatal("token 8's bytes checked as token 9's")
			}
		})
	}
}

// Segments shorter than a word (a sampled KV cache) are packed a word at
// a time: every length 1-7 and every token count to 17, so the run's
// last word is left holding each of 0-7 bytes, fill as the segments
// filled one by one do, check, and name the segment of any flipped byte.
func TestShortSegmentsEveryLastWord(t *testing.T) {
	for _, grid := range []bool{true, false} {
		t.Run(fmt.Sprintf("grid=%v", grid), func(t *testing.T) { testShortSegments(t, grid) })
	}
}

func testShortSegments(t *testing.T, grid bool) {
	const req, layer, headLo, headHi, token0 = 5, 1, 1, 3, 30
	for hb := 1; hb < 8; hb++ {
		for tpb := 1; tpb <= 17; tpb++ {
			n := (headHi - headLo) * tpb * hb
			want := make([]byte, n)
			for h := headLo; h < headHi; h++ {
				for tok := range tpb {
					at := ((h-headLo)*tpb + tok) * hb
					fillRef(want[at:at+hb], req, layer, topology.K, h, tpb, token0, tok, grid)
				}
			}
			got := make([]byte, n+1)[1:] // unaligned
			runPattern(opFill, got, nil, hb, req, layer, topology.K, headLo, headHi, tpb, token0, grid)
			require.Equal(t, want, got, "hb %d tpb %d: fill", hb, tpb)
			for i := range n {
				got[i] ^= 0x80
				head, tok, ok := checkRun(got, hb, req, layer, topology.K, headLo, headHi, tpb, token0, grid)
				got[i] ^= 0x80
				seg := i / hb
				require.False(t, ok, "hb %d tpb %d: byte %d flipped checks", hb, tpb, i)
				require.Equal(t, [2]int{headLo + seg/tpb, seg % tpb}, [2]int{head, tok}, "hb %d tpb %d: byte %d", hb, tpb, i)
			}
			_, _, ok := checkRun(got, hb, req, layer, topology.K, headLo, headHi, tpb, token0, grid)
			require.True(t, ok, "hb %d tpb %d: check", hb, tpb)
		}
	}
}

// VerifyBlock names the first corrupted segment of a filled block by
// layer, K/V, head and token; an empty head range checks nothing, and one
// outside the shard is refused.
func TestVerifyBlockNamesTheCorruptSegment(t *testing.T) {
	m := topology.Model{Layers: 3, KVHeads: 4, HeadDim: 32, TokensPerBlock: 5, ElemBytes: 2}
	s, err := topology.MustParseLayout("tp=2").Shard(m, 1) // heads [2,4)
	if err != nil {
		t.Fatal(err)
	}
	const req, blk = 9, 3
	block := make([]byte, s.BlockBytes())
	FillBlock(block, s, req, blk)
	if _, _, _, _, ok := VerifyBlock(block, s, req, blk, 0, m.Layers, s.HeadLo, s.HeadHi); !ok {
		t.Fatal("a filled block does not verify")
	}
	at := s.Offset(1, topology.V, 3, 4) + 17
	block[at] ^= 0x40
	if l, kv, h, tok, ok := VerifyBlock(block, s, req, blk, 0, m.Layers, s.HeadLo, s.HeadHi); ok || l != 1 || kv != topology.V || h != 3 || tok != 4 {
		t.Fatalf("corrupt byte at layer 1 V head 3 token 4: got ok %v at layer %d %v head %d token %d", ok, l, kv, h, tok)
	}
	if _, _, _, _, ok := VerifyBlock(block, s, req, blk, 0, m.Layers, 2, 3); !ok {
		t.Fatal("head 2 alone holds no corrupt byte but does not verify")
	}
	if _, _, _, _, ok := VerifyBlock(block, s, req, blk, 0, m.Layers, 4, 4); !ok {
		t.Fatal("an empty head range must verify")
	}
	defer func() {
		if msg, _ := recover().(string); !strings.Contains(msg, "outside shard heads [2,4)") {
			t.Fatalf("heads [2,5) of a shard holding [2,4): want a panic naming the shard's heads, got %q", msg)
		}
	}()
	VerifyBlock(block, s, req, blk, 0, 1, 2, 5) // one layer: [2,5) would still lie inside the block
}

// A corrupt fault at "first" flips the payload's first byte and at "last"
// its last: the two ends of the wire order, on every fragment shape.
func TestCorruptOffsetReachesBothEnds(t *testing.T) {
	m := topology.Model{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2}
	for _, tc := range []struct{ ctx, gen string }{{"tp=1", "tp=4"}, {"tp=2,pp=2", "tp=1"}, {"tp=1", "tp=2,pp=2"}} {
		ctxL, genL := topology.MustParseLayout(tc.ctx), topology.MustParseLayout(tc.gen)
		mp, err := topology.Map(ctxL, genL, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range mp.Fragments(0, 0) {
			shard, err := ctxL.Shard(m, f.CtxRank)
			if err != nil {
				t.Fatal(err)
			}
			tr := &Transceiver{cfg: Config{Model: m}, shard: shard}
			const blocks = 3
			payload := mp.FragmentBytes(f, f.BlockCount(blocks))
			first, _ := ParseCorruptAt("first")
			last, _ := ParseCorruptAt("last")
			if got := tr.corruptOffset(f, f.BlockCount(blocks), payload, first); got != 0 {
				t.Errorf("%s -> %s %s: first at %d, want 0", tc.ctx, tc.gen, f, got)
			}
			if got := tr.corruptOffset(f, f.BlockCount(blocks), payload, last); got != payload-1 {
				t.Errorf("%s -> %s %s: last at %d, want %d", tc.ctx, tc.gen, f, got, payload-1)
			}
		}
	}
}

// Right bytes in the wrong place do not verify: a block holding another
// head's, token's, layer's, K/V's, block's or request's pattern fails its
// check, for sampled heads of 2 and 4 bytes (the lane grid), of 1 byte and
// of 2 bytes in blocks too large for a lane (a mixed value a segment), and
// whole heads. Each misplacement moves the bytes of one whole (layer, K/V)
// run, or of one head or token in it.
func TestMisplacedBytesDoNotVerify(t *testing.T) {
	for _, m := range []topology.Model{
		{Layers: 4, KVHeads: 8, HeadDim: 1, TokensPerBlock: 16, ElemBytes: 2},
		{Layers: 4, KVHeads: 8, HeadDim: 2, TokensPerBlock: 64, ElemBytes: 2},
		{Layers: 4, KVHeads: 8, HeadDim: 1, TokensPerBlock: 64, ElemBytes: 1},
		{Layers: 3, KVHeads: 8, HeadDim: 1, TokensPerBlock: 16384, ElemBytes: 2},
		{Layers: 4, KVHeads: 8, HeadDim: 16, TokensPerBlock: 8, ElemBytes: 2},
	} {
		t.Run(fmt.Sprintf("hb=%d/tpb=%d/grid=%v", m.HeadBytes(), m.TokensPerBlock, sampledGrid(m)), func(t *testing.T) {
			s, err := topology.MustParseLayout("tp=1").Shard(m, 0)
			require.NoError(t, err)
			hb, tpb := m.HeadBytes(), m.TokensPerBlock
			fill := func(req uint64, blk int) []byte {
				b := make([]byte, s.BlockBytes())
				FillBlock(b, s, req, blk)
				return b
			}
			const req, blk = 11, 2
			good := fill(req, blk)
			verify := func(b []byte) bool {
				_, _, _, _, ok := VerifyBlock(b, s, req, blk, 0, m.Layers, 0, m.KVHeads)
				return ok
			}
			require.True(t, verify(good))
			run := s.RunBytes(0, m.KVHeads)
			headBytes := tpb * hb
			cases := map[string][]byte{}
			move := func(name string, from []byte, dstOff, srcOff, n int) {
				b := bytes.Clone(good)
				copy(b[dstOff:dstOff+n], from[srcOff:srcOff+n])
				cases[name] = b
			}
			l1 := s.Offset(1, topology.K, 0, 0)
			move("another block's run", fill(req, blk+1), l1, l1, run)
			move("another request's run", fill(req+1, blk), l1, l1, run)
			move("the next layer's run", good, l1, s.Offset(2, topology.K, 0, 0), run)
			move("V's run as K's", good, l1, s.Offset(1, topology.V, 0, 0), run)
			for _, dh := range []int{1, 2, 4, 7} {
				move(fmt.Sprintf("head %d's tokens as head 0's", dh), good, l1, l1+dh*headBytes, headBytes)
			}
			move("a token's value a token early", good, l1, l1+hb, hb)
			for name, b := range cases {
				require.False(t, verify(b), "%s: verifies", name)
			}
		})
	}
}
