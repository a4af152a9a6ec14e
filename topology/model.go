package topology

import "fmt"

// Model is the KV-cache geometry of the served model.
type Model struct {
	Layers         int // transformer layers
	KVHeads        int // KV heads per layer
	HeadDim        int // elements per head per token
	TokensPerBlock int // tokens in one KV block
	ElemBytes      int // bytes per element (2 for fp16/bf16)
}

// DefaultModel is a small model for tests and the default CLI run: 8 layers,
// 8 KV heads, head dimension 64, 16 tokens per block, 2-byte elements (256 KiB
// per block on a single rank).
func DefaultModel() Model {
	return Model{Layers: 8, KVHeads: 8, HeadDim: 64, TokensPerBlock: 16, ElemBytes: 2}
}

// MaxModelField bounds each Model field (Validate); MaxBlockBytes bounds
// their product.
const MaxModelField = 1 << 16

// Validate checks every field is in [1, 65536]. Errors wrap ErrInvalidModel
// and name the field.
func (m Model) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"Layers", m.Layers}, {"KVHeads", m.KVHeads}, {"HeadDim", m.HeadDim},
		{"TokensPerBlock", m.TokensPerBlock}, {"ElemBytes", m.ElemBytes},
	} {
		if f.v <= 0 {
			return fmt.Errorf("%w: %s must be positive (got %d)", ErrInvalidModel, f.name, f.v)
		}
		if f.v > MaxModelField {
			return fmt.Errorf("%w: %s must be at most %d (got %d)", ErrInvalidModel, f.name, MaxModelField, f.v)
		}
	}
	// Each field in range, their product may still overflow an int
	// (BlockBytes); a block above the largest pool could never be held.
	if b := float64(m.Layers) * float64(m.KVHeads) * 2 * float64(m.TokensPerBlock) * float64(m.HeadDim) * float64(m.ElemBytes); b > MaxBlockBytes {
		return fmt.Errorf("%w: a KV block of the whole model (Layers %d x KVHeads %d x 2 x TokensPerBlock %d x HeadDim %d x ElemBytes %d) is %.4g bytes: must be at most %d (1 TiB)",
			ErrInvalidModel, m.Layers, m.KVHeads, m.TokensPerBlock, m.HeadDim, m.ElemBytes, b, int64(MaxBlockBytes))
	}
	return nil
}

// MaxBlockBytes is the largest KV block of a whole model (every layer and
// head) Validate accepts: 1 TiB, the largest pool a rank may hold
// (kvpool.MaxPoolBytes), so that no product of a block overflows.
const MaxBlockBytes = 1 << 40

// Blocks is the number of KV blocks a request of n tokens needs in total
// (before any CP split): ceil(n / TokensPerBlock). It is 0 for n <= 0.
func (m Model) Blocks(tokens int) int {
	if tokens <= 0 {
		return 0
	}
	return (tokens + m.TokensPerBlock - 1) / m.TokensPerBlock
}

// HeadBytes is the size of one head of one token: HeadDim*ElemBytes.
func (m Model) HeadBytes() int { return m.HeadDim * m.ElemBytes }

// KV selects the key or the value half of the cache.
type KV int

const (
	K KV = 0 // keys
	V KV = 1 // values
)

func (kv KV) String() string {
	switch kv {
	case K:
		return "K"
	case V:
		return "V"
	}
	return fmt.Sprintf("KV(%d)", int(kv))
}

// ValidateFor checks that the layout can hold the model: Layers % PP == 0,
// and, unless AttentionDP (every rank holds every head), that TP and KVHeads
// divide one another (TP <= KVHeads: KVHeads % TP == 0, else TP % KVHeads ==
// 0, and heads are duplicated). It validates both first. Errors wrap
// ErrIncompatible (or ErrInvalidLayout / ErrInvalidModel).
func (l Layout) ValidateFor(m Model) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if err := m.Validate(); err != nil {
		return err
	}
	if m.Layers%l.PP != 0 {
		return fmt.Errorf("%w: layout %v: %d layers do not split evenly over pp=%d (Layers %% pp must be 0)",
			ErrIncompatible, l, m.Layers, l.PP)
	}
	if l.AttentionDP {
		return nil
	}
	if l.TP <= m.KVHeads && m.KVHeads%l.TP != 0 {
		return fmt.Errorf("%w: layout %v: %d KV heads do not split evenly over tp=%d (KVHeads %% tp must be 0)",
			ErrIncompatible, l, m.KVHeads, l.TP)
	}
	if l.TP > m.KVHeads && l.TP%m.KVHeads != 0 {
		return fmt.Errorf("%w: layout %v: tp=%d exceeds %d KV heads but is not a multiple of them (tp %% KVHeads must be 0 to duplicate heads)",
			ErrIncompatible, l, l.TP, m.KVHeads)
	}
	return nil
}

// Shard is what one rank holds of every request assigned to its DP index:
// layers [LayerLo, LayerHi), heads [HeadLo, HeadHi) of each of those layers,
// K and V, for the request blocks i with i % CP == CPIndex.
//
// Within one of the rank's blocks the bytes are laid out as
// [layer][K,V][head][token][HeadDim*ElemBytes], all indices local to the
// shard, so for one (layer, K/V) the rank's heads are contiguous.
type Shard struct {
	Rank             int
	Coord            Coord
	Model            Model
	LayerLo, LayerHi int
	HeadLo, HeadHi   int
	CP, CPIndex      int // block i of a request lives here iff i % CP == CPIndex
}

// Shard returns what rank holds. It returns an error if the layout cannot
// hold the model (see ValidateFor) and panics if rank is out of range.
func (l Layout) Shard(m Model, rank int) (Shard, error) {
	if err := l.ValidateFor(m); err != nil {
		return Shard{}, err
	}
	return l.shard(m, rank), nil
}

// shard assumes l.ValidateFor(m) holds.
func (l Layout) shard(m Model, rank int) Shard {
	c := l.Coord(rank)
	perStage := m.Layers / l.PP
	s := Shard{
		Rank: rank, Coord: c, Model: m,
		LayerLo: c.PP * perStage, LayerHi: (c.PP + 1) * perStage,
		CP: l.CP, CPIndex: c.CP,
	}
	s.HeadLo, s.HeadHi = l.headRange(m, c.TP)
	return s
}

// headRange is the head range of TP index tp (all heads under AttentionDP).
func (l Layout) headRange(m Model, tp int) (lo, hi int) {
	switch {
	case l.AttentionDP:
		return 0, m.KVHeads
	case l.TP <= m.KVHeads:
		h := m.KVHeads / l.TP
		return tp * h, (tp + 1) * h
	default:
		dup := l.TP / m.KVHeads
		return tp / dup, tp/dup + 1
	}
}

// headHolders returns the TP indices that hold head h, in increasing order.
func (l Layout) headHolders(m Model, h int) (first, count int) {
	switch {
	case l.AttentionDP:
		return 0, l.TP
	case l.TP <= m.KVHeads:
		return h / (m.KVHeads / l.TP), 1
	default:
		dup := l.TP / m.KVHeads
		return h * dup, dup
	}
}

// Layers is the number of layers the shard holds.
func (s Shard) Layers() int { return s.LayerHi - s.LayerLo }

// Heads is the number of heads the shard holds per layer.
func (s Shard) Heads() int { return s.HeadHi - s.HeadLo }

// BlockBytes is the size of one of this rank's blocks:
// layers*heads*2*TokensPerBlock*HeadDim*ElemBytes.
func (s Shard) BlockBytes() int {
	return s.Layers() * s.Heads() * 2 * s.Model.TokensPerBlock * s.Model.HeadBytes()
}

// Holds reports whether the shard holds (layer, head) of request block i.
func (s Shard) Holds(layer, head, block int) bool {
	return layer >= s.LayerLo && layer < s.LayerHi && head >= s.HeadLo && head < s.HeadHi &&
		block >= 0 && block%s.CP == s.CPIndex
}

// Offset is the byte offset, inside one of this rank's blocks, of the
// HeadBytes() bytes of (layer, kv, head, token) where layer and head are
// model-wide indices and token is the index within the block. It panics if
// the shard does not hold them.
func (s Shard) Offset(layer int, kv KV, head, token int) int {
	if layer < s.LayerLo || layer >= s.LayerHi || head < s.HeadLo || head >= s.HeadHi ||
		(kv != K && kv != V) || token < 0 || token >= s.Model.TokensPerBlock {
		panic(fmt.Sprintf("topology: offset of layer %d %v head %d token %d outside shard of rank %d (layers [%d,%d), heads [%d,%d), %d tokens per block)",
			layer, kv, head, token, s.Rank, s.LayerLo, s.LayerHi, s.HeadLo, s.HeadHi, s.Model.TokensPerBlock))
	}
	i := ((layer-s.LayerLo)*2+int(kv))*s.Heads() + (head - s.HeadLo)
	return (i*s.Model.TokensPerBlock + token) * s.Model.HeadBytes()
}

// RunBytes is the length of the contiguous run that starts at
// Offset(layer, kv, headLo, 0) and holds heads [headLo, headHi) of every
// token of the block: (headHi-headLo)*TokensPerBlock*HeadBytes.
func (s Shard) RunBytes(headLo, headHi int) int {
	return (headHi - headLo) * s.Model.TokensPerBlock * s.Model.HeadBytes()
}

// BlocksFor is the number of blocks this rank needs for a request of n
// tokens: its CP share of ceil(n / TokensPerBlock).
func (s Shard) BlocksFor(tokens int) int {
	return residueCount(s.Model.Blocks(tokens), s.CP, s.CPIndex)
}

// LocalBlock maps request block i to its index among this rank's blocks of
// the request (i / CP); ok is false if block i lives on another CP rank.
func (s Shard) LocalBlock(i int) (local int, ok bool) {
	if i < 0 || i%s.CP != s.CPIndex {
		return 0, false
	}
	return i / s.CP, true
}

// residueCount counts i in [0, n) with i % mod == rem.
func residueCount(n, mod, rem int) int {
	if n <= rem {
		return 0
	}
	return (n - rem + mod - 1) / mod
}
