package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxRanks bounds the number of ranks of one instance (and so each parallel
// size). It keeps rank arithmetic far from integer overflow.
const MaxRanks = 1 << 20

// Layout is the parallel layout of one instance. The zero value is not
// valid: every size is at least 1 (ParseLayout fills defaults of 1).
type Layout struct {
	TP int // tensor parallel size: splits KV heads
	PP int // pipeline parallel size: splits layers
	CP int // context parallel size: splits a request's blocks round robin
	DP int // data parallel size: a request is assigned to one DP index
	// AttentionDP (spec word "adp") makes all ranks of the instance one
	// executor group while attention stays data parallel: a request's KV
	// lives on the ranks of its DP index only, and every such rank holds all
	// heads. Requires DP > 1.
	AttentionDP bool
	// EP (spec key "ep") is the expert-parallel size of an MoE FFN: the
	// FFN ranks of one stage and CP index (TP of them, or TP*DP under
	// attention-DP) split the routed experts into EP parts, each part's
	// experts split over the other FFNRanks()/EP ranks (expert TP). It adds
	// no ranks and moves no KV: it changes who holds which experts and,
	// under attention-DP, makes each MoE layer an all-to-all dispatch and
	// combine over EPGroup. 0 and 1 both mean none; ParseLayout writes 0
	// for ep=1, so a parsed layout compares equal to its canonical form.
	EP int
}

// LayoutError reports a malformed spec or an invalid Layout. It names the
// field and the rule that failed, and matches ErrInvalidLayout with errors.Is.
type LayoutError struct {
	Spec  string // the spec as given, or the full form of a Layout value
	Field string // "tp", "pp", "cp", "dp", "ep", "adp", a bad key, or "" for the whole spec
	Rule  string // what was wrong, e.g. "must be a positive integer (got \"0\")"
}

func (e *LayoutError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("topology: layout %q: %s", e.Spec, e.Rule)
	}
	return fmt.Sprintf("topology: layout %q: %s %s", e.Spec, e.Field, e.Rule)
}

// Is makes errors.Is(err, ErrInvalidLayout) hold.
func (e *LayoutError) Is(target error) bool { return target == ErrInvalidLayout }

const validKeys = "tp, pp, cp, dp, ep (key=positive integer) and adp (no value)"

// ParseLayout parses a spec of comma-separated items: key=value with keys
// tp, pp, cp, dp, ep (each a positive integer, default 1, each at most
// once) and the bare word adp (attention data parallel, requires dp > 1);
// ep must divide the FFN ranks of a stage (tp, or tp*dp with adp). Keys are
// case-insensitive and whitespace around items, keys and values is ignored.
// Examples: "tp=2,pp=2", "dp=4,adp", "dp=4,ep=4,adp", "tp=8,ep=8", "tp=1".
// The spec must name at least one
// item. Errors are *LayoutError values wrapping ErrInvalidLayout.
func ParseLayout(spec string) (Layout, error) {
	l := Layout{TP: 1, PP: 1, CP: 1, DP: 1}
	bad := func(field, format string, args ...any) (Layout, error) {
		return Layout{}, &LayoutError{Spec: spec, Field: field, Rule: fmt.Sprintf(format, args...)}
	}
	if strings.TrimSpace(spec) == "" {
		return bad("", `empty spec (want comma-separated items from %s, e.g. "tp=2,pp=2")`, validKeys)
	}
	seen := map[string]bool{}
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return bad("", "item %d is empty (stray comma?)", i+1)
		}
		key, value, hasValue := strings.Cut(item, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		value = strings.TrimSpace(value)
		var dst *int
		switch key {
		case "tp":
			dst = &l.TP
		case "pp":
			dst = &l.PP
		case "cp":
			dst = &l.CP
		case "dp":
			dst = &l.DP
		case "ep":
			dst = &l.EP
		case "adp":
			if hasValue {
				return bad("adp", "takes no value (write a bare adp, got %q)", item)
			}
		default:
			return bad(strconv.Quote(key), "is not a valid key (valid: %s)", validKeys)
		}
		if seen[key] {
			return bad(key, "given more than once")
		}
		seen[key] = true
		if key == "adp" {
			l.AttentionDP = true
			continue
		}
		if !hasValue {
			return bad(key, "needs a value (write %s=N with N a positive integer)", key)
		}
		n, err := strconv.Atoi(value)
		if err != nil || n <= 0 {
			return bad(key, "must be a positive integer (got %q)", value)
		}
		if n > MaxRanks {
			return bad(key, "must be at most %d (got %d)", MaxRanks, n)
		}
		*dst = n
	}
	if l.EP == 1 {
		l.EP = 0 // one canonical form for "no expert parallelism"
	}
	if err := l.validate(spec); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// MustParseLayout is ParseLayout for constant specs in tests and examples; it
// panics on an error.
func MustParseLayout(spec string) Layout {
	l, err := ParseLayout(spec)
	if err != nil {
		panic(err)
	}
	return l
}

// Validate checks every size is in [1, MaxRanks], that the instance has at
// most MaxRanks ranks, that AttentionDP comes with DP > 1, and that EP (0
// or 1: none) divides FFNRanks().
func (l Layout) Validate() error { return l.validate("") }

// validate checks l; spec is the spec as written (the full form of l when
// empty), rendered only into an error.
func (l Layout) validate(spec string) error {
	bad := func(field, rule string) error {
		if spec == "" {
			spec = l.full()
		}
		return &LayoutError{Spec: spec, Field: field, Rule: rule}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"tp", l.TP}, {"pp", l.PP}, {"cp", l.CP}, {"dp", l.DP}} {
		if f.v <= 0 {
			return bad(f.name, fmt.Sprintf("must be a positive integer (got %d)", f.v))
		}
		if f.v > MaxRanks {
			return bad(f.name, fmt.Sprintf("must be at most %d (got %d)", MaxRanks, f.v))
		}
	}
	// Each factor is at most MaxRanks = 2^20, so multiply step by step and
	// stop before the product can overflow.
	n := 1
	for _, v := range []int{l.TP, l.PP, l.CP, l.DP} {
		n *= v
		if n > MaxRanks {
			return bad("", fmt.Sprintf("tp*pp*cp*dp must be at most %d ranks", MaxRanks))
		}
	}
	if l.AttentionDP && l.DP < 2 {
		return bad("adp", fmt.Sprintf("requires dp > 1 (got dp=%d)", l.DP))
	}
	switch f := l.FFNRanks(); {
	case l.EP < 0:
		return bad("ep", fmt.Sprintf("must be a positive integer (got %d)", l.EP))
	case l.EP > 1 && f%l.EP != 0 && l.AttentionDP:
		return bad("ep", fmt.Sprintf("must divide the FFN ranks of a stage, tp*dp = %d under adp (got ep=%d)", f, l.EP))
	case l.EP > 1 && f%l.EP != 0:
		return bad("ep", fmt.Sprintf("must divide the FFN ranks of a stage, tp = %d without adp (got ep=%d)", f, l.EP))
	}
	return nil
}

// FFNRanks is how many ranks of one stage and CP index run the FFN
// together: TP, or TP*DP under attention-DP.
func (l Layout) FFNRanks() int {
	if l.AttentionDP {
		return l.TP * l.DP
	}
	return l.TP
}

// Experts is the expert-parallel size: EP, 1 when EP is 0.
func (l Layout) Experts() int { return max(1, l.EP) }

// full writes every field, valid or not; used in errors about Layout values.
func (l Layout) full() string {
	s := fmt.Sprintf("tp=%d,pp=%d,cp=%d,dp=%d", l.TP, l.PP, l.CP, l.DP)
	if l.EP > 1 || l.EP < 0 {
		s += fmt.Sprintf(",ep=%d", l.EP)
	}
	if l.AttentionDP {
		s += ",adp"
	}
	return s
}

// String returns the canonical spec: the sizes other than 1 in the order tp,
// pp, cp, dp, ep, then adp; "tp=1" when every size is 1. ParseLayout(l.String())
// returns l for every valid l whose EP is not 1 (ep=1 parses as EP 0).
func (l Layout) String() string {
	var b strings.Builder
	add := func(s string) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"tp", l.TP}, {"pp", l.PP}, {"cp", l.CP}, {"dp", l.DP}, {"ep", l.Experts()}} {
		if f.v != 1 {
			add(f.name + "=" + strconv.Itoa(f.v))
		}
	}
	if b.Len() == 0 {
		add("tp=1")
	}
	if l.AttentionDP {
		add("adp")
	}
	return b.String()
}

// Ranks is the number of ranks of the instance: TP*PP*CP*DP.
func (l Layout) Ranks() int { return l.TP * l.PP * l.CP * l.DP }

// ReplicaRanks is the number of ranks of one DP index: TP*PP*CP. They are the
// ranks that hold the KV of a request assigned to that DP index.
func (l Layout) ReplicaRanks() int { return l.TP * l.PP * l.CP }

// Coord is the position of a rank in its instance.
type Coord struct {
	DP, PP, CP, TP int
}

func (c Coord) String() string {
	return fmt.Sprintf("dp%d/pp%d/cp%d/tp%d", c.DP, c.PP, c.CP, c.TP)
}

// Coord returns the coordinates of an instance rank. It panics if rank is
// outside [0, Ranks()).
func (l Layout) Coord(rank int) Coord {
	l.checkRank(rank)
	c := Coord{TP: rank % l.TP}
	rank /= l.TP
	c.CP = rank % l.CP
	rank /= l.CP
	c.PP = rank % l.PP
	c.DP = rank / l.PP
	return c
}

// RankOf returns the instance rank at c: ((dp*PP + pp)*CP + cp)*TP + tp. It
// panics if a coordinate is out of range.
func (l Layout) RankOf(c Coord) int {
	if c.DP < 0 || c.DP >= l.DP || c.PP < 0 || c.PP >= l.PP || c.CP < 0 || c.CP >= l.CP || c.TP < 0 || c.TP >= l.TP {
		panic(fmt.Sprintf("topology: coordinate %v outside layout %v", c, l))
	}
	return ((c.DP*l.PP+c.PP)*l.CP+c.CP)*l.TP + c.TP
}

func (l Layout) checkRank(rank int) {
	if rank < 0 || rank >= l.Ranks() {
		panic(fmt.Sprintf("topology: rank %d outside layout %v (%d ranks)", rank, l, l.Ranks()))
	}
}
