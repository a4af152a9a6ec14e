package consensus

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output in testdata/*.txt")

// TestData runs the cases in testdata/cases.txt. A case is a command line
// ("ready" or "decide"), one line per rank, "----", and the expected
// output; cases are separated by blank lines and "#" starts a comment.
// A "ready" rank line is a comma-separated id list ("-" for none); a
// "decide" rank line is "c=... f=... d=... q=..." (missing keys are empty).
// Run with -rewrite to regenerate the expected output.
func TestData(t *testing.T) {
	const path = "testdata/cases.txt"
	raw, err := os.ReadFile(path)
	mustNoError(t, err, "read %s", path)
	cases := parseCases(t, string(raw))
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	var out strings.Builder
	for i, c := range cases {
		got := c.run(t)
		if *rewrite {
			c.want = got
		} else {
			checkEqual(t, c.want, got, "case %d at line %d (%s)", i, c.line, c.cmd)
		}
		if i > 0 {
			out.WriteString("\n")
		}
		c.write(&out)
	}
	if *rewrite {
		mustNoError(t, os.WriteFile(path, []byte(out.String()), 0o644), "rewrite %s", path)
	}
}

type dataCase struct {
	line     int
	comments []string
	cmd      string
	ranks    []string
	want     string
}

func parseCases(t *testing.T, s string) []*dataCase {
	t.Helper()
	var cases []*dataCase
	var cur *dataCase
	inWant := false
	sc := bufio.NewScanner(strings.NewReader(s))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), " \t")
		switch {
		case line == "":
			if cur != nil {
				if !inWant {
					t.Fatalf("line %d: case without ----", n)
				}
				cases = append(cases, cur)
			}
			cur, inWant = nil, false
		case cur == nil || (cur.cmd == "" && strings.HasPrefix(line, "#")):
			if cur == nil {
				cur = &dataCase{line: n}
			}
			if strings.HasPrefix(line, "#") {
				cur.comments = append(cur.comments, line)
			} else {
				cur.cmd = line
			}
		case cur.cmd == "":
			cur.cmd = line
		case line == "----":
			inWant = true
		case inWant:
			cur.want += line + "\n"
		default:
			cur.ranks = append(cur.ranks, line)
		}
	}
	mustNoError(t, sc.Err(), "scan")
	if cur != nil {
		if !inWant {
			t.Fatal("last case without ----")
		}
		cases = append(cases, cur)
	}
	return cases
}

func (c *dataCase) write(b *strings.Builder) {
	for _, l := range c.comments {
		b.WriteString(l + "\n")
	}
	b.WriteString(c.cmd + "\n")
	for _, l := range c.ranks {
		b.WriteString(l + "\n")
	}
	b.WriteString("----\n")
	b.WriteString(c.want)
}

func parseList(t *testing.T, s string) []uint64 {
	t.Helper()
	if s == "" || s == "-" {
		return []uint64{}
	}
	var ids []uint64
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		mustNoError(t, err, "id %q", f)
		ids = append(ids, id)
	}
	return ids
}

func fmtList(ids []uint64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(parts, ",")
}

func (c *dataCase) run(t *testing.T) string {
	switch c.cmd {
	case "ready":
		var per [][]uint64
		for _, l := range c.ranks {
			per = append(per, parseList(t, l))
		}
		got := Ready(per)
		mustEqual(t, bruteReady(per), got, "line %d: Ready disagrees with the reference", c.line)
		return "ready=" + fmtList(got) + "\n"
	case "decide":
		var votes []Vote
		for _, l := range c.ranks {
			var v Vote
			for _, f := range strings.Fields(l) {
				k, val, ok := strings.Cut(f, "=")
				if !ok {
					t.Fatalf("line %d: field %q", c.line, f)
				}
				ids := parseList(t, val)
				switch k {
				case "c":
					v.Cancelled = ids
				case "f":
					v.Failed = ids
				case "d":
					v.Completed = ids
				case "q":
					v.Quiesced = ids
				default:
					t.Fatalf("line %d: unknown key %q", c.line, k)
				}
			}
			votes = append(votes, v)
		}
		got := Decide(votes)
		mustEqual(t, bruteDecide(votes), got, "line %d: Decide disagrees with the reference", c.line)
		return fmt.Sprintf("cancelled=%s\nfailed=%s\ncompleted=%s\nquiesced=%s\n",
			fmtList(got.Cancelled), fmtList(got.Failed), fmtList(got.Completed), fmtList(got.Quiesced))
	}
	t.Fatalf("line %d: unknown command %q", c.line, c.cmd)
	return ""
}

func TestReadyTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   [][]uint64
		want []uint64
	}{
		{"zero ranks", nil, nil},
		{"one rank", [][]uint64{{3, 1, 2, 1}}, []uint64{1, 2, 3}},
		{"one empty rank", [][]uint64{{}}, nil},
		{"empty rank blocks all", [][]uint64{{1, 2}, {}, {1, 2}}, nil},
		{"intersection", [][]uint64{{5, 1, 9}, {9, 5, 5}, {1, 5, 9, 7}}, []uint64{5, 9}},
		{"large ids", [][]uint64{{1<<63 + 1, 1}, {1, 1<<63 + 1}}, []uint64{1, 1<<63 + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := cloneLists(tc.in)
			checkEqual(t, tc.want, Ready(tc.in), "Ready")
			checkEqual(t, in, tc.in, "Ready modified its input")
		})
	}
}

func TestDecideTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		votes []Vote
		want  Outcome
	}{
		{"zero ranks", nil, Outcome{}},
		{"one empty vote", []Vote{{}}, Outcome{}},
		{
			"precedence on one rank",
			[]Vote{{Cancelled: []uint64{1}, Failed: []uint64{1, 2}, Completed: []uint64{1, 2, 3}, Quiesced: []uint64{3, 3}}},
			Outcome{Cancelled: []uint64{1}, Failed: []uint64{2}, Completed: []uint64{3}, Quiesced: []uint64{3}},
		},
		{
			"one rank not done keeps it in flight",
			[]Vote{{Completed: []uint64{1, 2}}, {Completed: []uint64{2}}},
			Outcome{Completed: []uint64{2}},
		},
		{
			"failure on one rank fails everywhere",
			[]Vote{{Completed: []uint64{1, 2}}, {Failed: []uint64{1}, Completed: []uint64{2}}},
			Outcome{Failed: []uint64{1}, Completed: []uint64{2}},
		},
		{
			"cancel on one rank beats failure on another",
			[]Vote{{Failed: []uint64{4}}, {Cancelled: []uint64{4}}},
			Outcome{Cancelled: []uint64{4}},
		},
		{
			"quiesced is an intersection independent of the rest",
			[]Vote{{Cancelled: []uint64{1}, Quiesced: []uint64{1, 2}}, {Quiesced: []uint64{2, 1, 1}}},
			Outcome{Cancelled: []uint64{1}, Quiesced: []uint64{1, 2}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkEqual(t, tc.want, Decide(tc.votes), "Decide")
		})
	}
}

func cloneLists(in [][]uint64) [][]uint64 {
	if in == nil {
		return nil
	}
	out := make([][]uint64, len(in))
	for i, l := range in {
		out[i] = slices.Clone(l)
	}
	return out
}

func cloneVotes(in []Vote) []Vote {
	out := make([]Vote, len(in))
	for i, v := range in {
		out[i] = Vote{slices.Clone(v.Cancelled), slices.Clone(v.Failed), slices.Clone(v.Completed), slices.Clone(v.Quiesced)}
	}
	return out
}

const propertyRounds = 2000

// TestReadyProperties checks Ready against the brute-force reference on
// random inputs, and that it ignores rank order and duplicate ranks.
func TestReadyProperties(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range propertyRounds {
		per := genReady(rng, rng.IntN(7))
		in := cloneLists(per)
		got := Ready(per)
		mustEqual(t, bruteReady(per), got, "seed %d round %d: %v", seed, i, per)
		mustEqual(t, in, per, "seed %d round %d: input modified", seed, i)
		if !strictlyAscending(got) {
			t.Fatalf("seed %d round %d: not ascending: %v", seed, i, got)
		}

		shuffled := cloneLists(per)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		mustEqual(t, got, Ready(shuffled), "seed %d round %d: depends on rank order", seed, i)
		mustEqual(t, got, Ready(append(cloneLists(per), per...)), "seed %d round %d: not idempotent", seed, i)
	}
}

// TestDecideProperties checks Decide against the brute-force reference and
// its invariants: the three verdicts are disjoint, results ascend, rank
// order does not matter, and deciding over the outcome again changes
// nothing.
func TestDecideProperties(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	for i := range propertyRounds {
		votes := genVotes(rng, rng.IntN(7))
		in := cloneVotes(votes)
		got := Decide(votes)
		mustEqual(t, bruteDecide(votes), got, "seed %d round %d: %+v", seed, i, votes)
		mustEqual(t, in, votes, "seed %d round %d: input modified", seed, i)

		for _, l := range [][]uint64{got.Cancelled, got.Failed, got.Completed, got.Quiesced} {
			if !strictlyAscending(l) {
				t.Fatalf("seed %d round %d: not ascending: %v", seed, i, l)
			}
		}
		for _, id := range got.Failed {
			if slices.Contains(got.Cancelled, id) {
				t.Fatalf("seed %d round %d: %d both cancelled and failed", seed, i, id)
			}
		}
		for _, id := range got.Completed {
			if slices.Contains(got.Cancelled, id) || slices.Contains(got.Failed, id) {
				t.Fatalf("seed %d round %d: %d completed and cancelled or failed", seed, i, id)
			}
		}

		shuffled := cloneVotes(votes)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		mustEqual(t, got, Decide(shuffled), "seed %d round %d: depends on rank order", seed, i)

		again := Decide([]Vote{{got.Cancelled, got.Failed, got.Completed, got.Quiesced}})
		mustEqual(t, got, again, "seed %d round %d: not a fixed point", seed, i)
	}
}
