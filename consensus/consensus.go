package consensus

// Vote is one rank's view of the ready ids in phase 3 of a status check:
// the ids it saw cancelled, failed, completed, and quiesced (no write of
// this rank still in flight). Lists may be unsorted and hold duplicates.
type Vote struct {
	Cancelled []uint64
	Failed    []uint64
	Completed []uint64
	Quiesced  []uint64
}

// Outcome is the group's decision from every rank's Vote. Each list is
// sorted ascending without duplicates; an id is in at most one of
// Cancelled, Failed and Completed. Quiesced is independent of the other
// three. Lists that are empty may be nil.
type Outcome struct {
	Cancelled []uint64 // reported cancelled by any rank
	Failed    []uint64 // reported failed by any rank, and not cancelled
	Completed []uint64 // reported completed by every rank, neither cancelled nor failed
	Quiesced  []uint64 // reported quiesced by every rank
}

// Ready returns the ids reported by every rank (the intersection of
// perRank), sorted ascending without duplicates. Duplicates within one
// rank's list count once. With zero ranks nothing is ready (nil).
func Ready(perRank [][]uint64) []uint64 {
	var f folder
	var scratch []uint64
	for _, ids := range perRank {
		scratch = normalize(scratch, ids)
		f.intersect(scratch)
		if len(f.acc) == 0 {
			break // the intersection can only stay empty
		}
	}
	return nilIfEmpty(f.acc)
}

// Decide folds every rank's vote into the group's outcome:
//
//	Cancelled = union of Cancelled
//	Failed    = union of Failed, minus Cancelled
//	Completed = intersection of Completed, minus Cancelled, minus Failed
//	Quiesced  = intersection of Quiesced
//
// so precedence is cancelled > failed > completed, and a rank that has not
// (yet) seen an id complete keeps it out of Completed. Zero votes give an
// empty Outcome. The result does not depend on the order of votes.
func Decide(votes []Vote) Outcome {
	var t tally
	t.reset()
	var scratch []uint64
	for _, v := range votes {
		t.add(&scratch, v)
	}
	var out Outcome
	t.finish(&out, &scratch)
	out.Cancelled = nilIfEmpty(out.Cancelled)
	out.Failed = nilIfEmpty(out.Failed)
	out.Completed = nilIfEmpty(out.Completed)
	out.Quiesced = nilIfEmpty(out.Quiesced)
	return out
}

// tally carries the raw unions and intersections of votes. Precedence is
// applied only by finish (Agree's words carry the same raw tallies between
// hops).
type tally struct {
	cancelled folder // union
	failed    folder // union
	completed folder // intersection
	quiesced  folder // intersection
}

func (t *tally) reset() {
	t.cancelled.reset()
	t.failed.reset()
	t.completed.reset()
	t.quiesced.reset()
}

// add normalizes each list of v (through scratch) and folds it in.
func (t *tally) add(scratch *[]uint64, v Vote) {
	*scratch = normalize(*scratch, v.Cancelled)
	t.cancelled.union(*scratch)
	*scratch = normalize(*scratch, v.Failed)
	t.failed.union(*scratch)
	*scratch = normalize(*scratch, v.Completed)
	t.completed.intersect(*scratch)
	*scratch = normalize(*scratch, v.Quiesced)
	t.quiesced.intersect(*scratch)
}

// finish applies precedence into out, reusing its buffers.
func (t *tally) finish(out *Outcome, scratch *[]uint64) {
	decideRaw(out, scratch, t.cancelled.acc, t.failed.acc, t.completed.acc, t.quiesced.acc)
}

// decideRaw applies precedence to raw unions (c, f) and intersections (d,
// q), all sorted without duplicates, writing into out's buffers.
func decideRaw(out *Outcome, scratch *[]uint64, c, f, d, q []uint64) {
	out.Cancelled = append(out.Cancelled[:0], c...)
	out.Failed = subtractInto(out.Failed, f, c)
	*scratch = subtractInto(*scratch, d, c)
	out.Completed = subtractInto(out.Completed, *scratch, f)
	out.Quiesced = append(out.Quiesced[:0], q...)
}

func nilIfEmpty(s []uint64) []uint64 {
	if len(s) == 0 {
		return nil
	}
	return s
}
