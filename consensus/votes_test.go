package consensus

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rankrun/rankrun/comm"
)

// Votes stays strictly ascending by id under any sequence of Put and Keep,
// holds the last word put for each id, and AgreeVotes decides what Agree
// decides over the same words.
func TestVotesStayOrdered(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 200 {
		var v Votes
		want := map[uint64]int64{}
		for range rng.IntN(200) {
			id := uint64(rng.IntN(64))
			w := Word(id, State(1+rng.IntN(3)), rng.IntN(2) == 0)
			v.Put(w)
			want[id] = w
			if rng.IntN(8) == 0 {
				drop := uint64(rng.IntN(64))
				v.Keep(func(w int64) bool { return WordID(w) != drop })
				delete(want, drop)
			}
		}
		got := v.Words()
		if err := ascending(got); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(got) != len(want) || v.Len() != len(want) {
			t.Fatalf("round %d: %d words, want %d", round, len(got), len(want))
		}
		for _, w := range got {
			if want[WordID(w)] != w {
				t.Fatalf("round %d: id %d holds %#x, want the last put %#x", round, WordID(w), w, want[WordID(w)])
			}
		}
		var g1, g2 Gatherer
		a, err := g1.Agree(context.Background(), []comm.Comm{}, got)
		if err != nil {
			t.Fatal(err)
		}
		b, err := g2.AgreeVotes(context.Background(), []comm.Comm{}, &v)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a, b) {
			t.Fatalf("round %d: AgreeVotes %v, Agree %v", round, b, a)
		}
	}
}
