package topology

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLayout(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Layout
		str  string
	}{
		{"tp=1", Layout{1, 1, 1, 1, false, 0}, "tp=1"},
		{"tp=2,pp=2", Layout{2, 2, 1, 1, false, 0}, "tp=2,pp=2"},
		{"dp=4,adp", Layout{1, 1, 1, 4, true, 0}, "dp=4,adp"},
		{" TP = 4 , Pp=2, cp=2 ,dp=2 ", Layout{4, 2, 2, 2, false, 0}, "tp=4,pp=2,cp=2,dp=2"},
		{"adp,dp=2", Layout{1, 1, 1, 2, true, 0}, "dp=2,adp"},
		{"ADP, dp=2, tp=2", Layout{2, 1, 1, 2, true, 0}, "tp=2,dp=2,adp"},
		{"dp=1", Layout{1, 1, 1, 1, false, 0}, "tp=1"},
		{"tp=8,ep=8", Layout{8, 1, 1, 1, false, 8}, "tp=8,ep=8"},
		{"dp=4,ep=4,adp", Layout{1, 1, 1, 4, true, 4}, "dp=4,ep=4,adp"},
		{"adp,ep=2,tp=2,dp=2", Layout{2, 1, 1, 2, true, 2}, "tp=2,dp=2,ep=2,adp"},
		{"tp=4,ep=1", Layout{4, 1, 1, 1, false, 0}, "tp=4"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			l, err := ParseLayout(tc.spec)
			require.NoError(t, err)
			assert.Equal(t, tc.want, l)
			assert.Equal(t, tc.str, l.String())
			assert.Equal(t, l.TP*l.PP*l.CP*l.DP, l.Ranks())
			back, err := ParseLayout(l.String())
			require.NoError(t, err)
			assert.Equal(t, l, back)
		})
	}
}

func TestParseLayoutErrors(t *testing.T) {
	for _, tc := range []struct {
		spec, field, msg string
	}{
		{"", "", `topology: layout "": empty spec (want comma-separated items from tp, pp, cp, dp, ep (key=positive integer) and adp (no value), e.g. "tp=2,pp=2")`},
		{"  ", "", `topology: layout "  ": empty spec`},
		{"tp=", "tp", `topology: layout "tp=": tp must be a positive integer (got "")`},
		{"tp", "tp", `topology: layout "tp": tp needs a value (write tp=N with N a positive integer)`},
		{"tp=0", "tp", `topology: layout "tp=0": tp must be a positive integer (got "0")`},
		{"tp=-1", "tp", `topology: layout "tp=-1": tp must be a positive integer (got "-1")`},
		{"pp=x", "pp", `topology: layout "pp=x": pp must be a positive integer (got "x")`},
		{"cp=1.5", "cp", `topology: layout "cp=1.5": cp must be a positive integer (got "1.5")`},
		{"tp=2,tp=2", "tp", `topology: layout "tp=2,tp=2": tp given more than once`},
		{"tp=2,TP=4", "tp", `topology: layout "tp=2,TP=4": tp given more than once`},
		{"dp=2,adp,adp", "adp", `topology: layout "dp=2,adp,adp": adp given more than once`},
		{"foo=1", `"foo"`, `topology: layout "foo=1": "foo" is not a valid key (valid: tp, pp, cp, dp, ep (key=positive integer) and adp (no value))`},
		{"tp=2,ep=3", "ep", `topology: layout "tp=2,ep=3": ep must divide the FFN ranks of a stage, tp = 2 without adp (got ep=3)`},
		{"dp=4,ep=8", "ep", `ep must divide the FFN ranks of a stage, tp = 1 without adp (got ep=8)`},
		{"dp=4,tp=2,ep=16,adp", "ep", `ep must divide the FFN ranks of a stage, tp*dp = 8 under adp (got ep=16)`},
		{"dp=4,ep=3,adp", "ep", `tp*dp = 4 under adp (got ep=3)`},
		{"ep=0", "ep", `ep must be a positive integer (got "0")`},
		{"ep=2,ep=2", "ep", `ep given more than once`},
		{"adp", "adp", `topology: layout "adp": adp requires dp > 1 (got dp=1)`},
		{"dp=1,adp", "adp", `adp requires dp > 1 (got dp=1)`},
		{"dp=2,adp=1", "adp", `adp takes no value`},
		{"tp=99999999999999999999", "tp", `topology: layout "tp=99999999999999999999": tp must be a positive integer (got "99999999999999999999")`},
		{"tp=2000000", "tp", `tp must be at most 1048576 (got 2000000)`},
		{"tp=1024,pp=1024,dp=2", "", `tp*pp*cp*dp must be at most 1048576 ranks`},
		{"tp=2,", "", `item 2 is empty (stray comma?)`},
		{",tp=2", "", `item 1 is empty`},
		{"tp=2;pp=2", "tp", `tp must be a positive integer (got "2;pp=2")`},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := ParseLayout(tc.spec)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidLayout)
			var le *LayoutError
			require.True(t, errors.As(err, &le))
			assert.Equal(t, tc.field, le.Field)
			assert.Equal(t, tc.spec, le.Spec)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

func TestLayoutValidate(t *testing.T) {
	assert.NoError(t, Layout{TP: 2, PP: 1, CP: 1, DP: 1}.Validate())
	err := Layout{}.Validate()
	assert.ErrorIs(t, err, ErrInvalidLayout)
	assert.EqualError(t, err, `topology: layout "tp=0,pp=0,cp=0,dp=0": tp must be a positive integer (got 0)`)
	err = Layout{TP: 1, PP: 1, CP: 1, DP: 1, AttentionDP: true}.Validate()
	assert.EqualError(t, err, `topology: layout "tp=1,pp=1,cp=1,dp=1,adp": adp requires dp > 1 (got dp=1)`)
}

func TestCoordRoundTrip(t *testing.T) {
	l := MustParseLayout("tp=2,pp=3,cp=2,dp=2")
	require.Equal(t, 24, l.Ranks())
	// TP fastest, DP slowest.
	assert.Equal(t, Coord{DP: 0, PP: 0, CP: 0, TP: 1}, l.Coord(1))
	assert.Equal(t, Coord{DP: 0, PP: 0, CP: 1, TP: 0}, l.Coord(2))
	assert.Equal(t, Coord{DP: 0, PP: 1, CP: 0, TP: 0}, l.Coord(4))
	assert.Equal(t, Coord{DP: 1, PP: 0, CP: 0, TP: 0}, l.Coord(12))
	assert.Equal(t, "dp1/pp2/cp1/tp1", l.Coord(23).String())
	for r := 0; r < l.Ranks(); r++ {
		assert.Equal(t, r, l.RankOf(l.Coord(r)))
	}
	assert.Panics(t, func() { l.Coord(24) })
	assert.Panics(t, func() { l.Coord(-1) })
	assert.Panics(t, func() { l.RankOf(Coord{TP: 2}) })
}

func FuzzParseLayout(f *testing.F) {
	for _, s := range []string{"tp=1", "tp=2,pp=2", "dp=4,adp", " TP = 4 , Pp=2, cp=2 ,dp=2 ", "", "tp=", "adp",
		"tp=2,tp=2", "foo=1", "tp=99999999999999999999", "tp=1024,pp=1024", ",", "adp=1", "dp=4,ep=4,adp", "tp=8,ep=8", "ep=1", "tp=2,ep=3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		l, err := ParseLayout(spec)
		if err != nil {
			if !errors.Is(err, ErrInvalidLayout) {
				t.Fatalf("error %v does not wrap ErrInvalidLayout", err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLayout(%q) = %+v which does not validate: %v", spec, l, err)
		}
		back, err := ParseLayout(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLayout(%q) = %+v; String %q parses to %+v, %v", spec, l, l.String(), back, err)
		}
		if l.Ranks() < 1 || l.Ranks() > MaxRanks {
			t.Fatalf("ranks %d out of range", l.Ranks())
		}
	})
}

func TestRoleOf(t *testing.T) {
	ctx, gen := MustParseLayout("tp=2"), MustParseLayout("tp=4")
	for w := range ctx.Ranks() + gen.Ranks() {
		role, r := RoleOf(ctx, gen, w)
		want := Context
		if w >= 2 {
			want = Generation
		}
		assert.Equal(t, want, role)
		assert.Equal(t, w, WorldRank(ctx, role, r))
	}
	assert.Equal(t, "gen", Generation.String())
}
