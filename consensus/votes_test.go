package consensus

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rankrun/rankrun/comm"
	"github.com/rankrun/rankrun/comm/local"
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

// Through a real two-hop scope (four in-process ranks: pairs, then across),
// AgreeVotes decides exactly what Agree decides on the same random votes.
func TestAgreeVotesEqualsAgreeOverRanks(t *testing.T) {
	for seed := range uint64(20) {
		err := local.Run(context.Background(), 4, local.Config{Timeout: 10 * time.Second}, func(ctx context.Context, c comm.Comm) error {
			a, err := c.Split(ctx, c.Rank()/2, c.Rank())
			if err != nil {
				return err
			}
			b, err := c.Split(ctx, c.Rank()%2, c.Rank())
			if err != nil {
				return err
			}
			rng := rand.New(rand.NewPCG(seed, uint64(c.Rank())))
			var v Votes
			for range rng.IntN(40) {
				v.Put(Word(uint64(rng.IntN(24)), State(1+rng.IntN(3)), rng.IntN(3) > 0))
			}
			words := slices.Clone(v.Words())
			var g1, g2 Gatherer
			scope := []comm.Comm{a, b}
			want, err := g1.Agree(ctx, scope, words)
			if err != nil {
				return err
			}
			want = slices.Clone(want)
			got, err := g2.AgreeVotes(ctx, scope, &v)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("seed %d rank %d: AgreeVotes %v, Agree %v", seed, c.Rank(), got, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
