package consensus

import (
	"cmp"
	"slices"
)

// Votes is one rank's contribution to Agree kept as sessions end: a word
// per terminal session, strictly ascending by id by construction, so
// AgreeVotes need not check the order on every status check (Agree, which
// takes any slice, does). The zero value is empty and ready to use.
type Votes struct {
	words []int64
}

// Len is the number of words.
func (v *Votes) Len() int { return len(v.words) }

// Words returns the words, ascending by id. The slice is v's: read it,
// never write it, and not past v's next change.
func (v *Votes) Words() []int64 { return v.words }

// Put adds w, or replaces the word that carries the same id.
func (v *Votes) Put(w int64) {
	id := WordID(w)
	i, found := slices.BinarySearchFunc(v.words, id, func(x int64, id uint64) int { return cmp.Compare(WordID(x), id) })
	if found {
		v.words[i] = w
		return
	}
	v.words = slices.Insert(v.words, i, w)
}

// Keep removes every word for which keep is false (order is kept).
func (v *Votes) Keep(keep func(w int64) bool) {
	v.words = slices.DeleteFunc(v.words, func(w int64) bool { return !keep(w) })
}
