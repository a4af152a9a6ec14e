package costmodel

import "time"

// decode is the time of one decode step of batch by this side's executor
// group, pipelined in steady state: every stage runs each micro-batch once
// per step, and a micro-batch goes round every stage once, so the step is
// the larger of the busiest stage's sum and the slowest round trip.
func (s side) decode(batch []Seq) time.Duration {
	if len(batch) == 0 {
		return 0
	}
	mbs := s.micro(batch)
	t, send := s.stageTimes(mbs, s.decodeStage)
	var busiest, trip time.Duration
	for pp := range s.l.PP {
		var sum time.Duration
		for j := range mbs {
			sum = add(sum, t[pp][j])
		}
		busiest = max(busiest, sum)
	}
	for j := range mbs {
		var sum time.Duration
		for pp := range s.l.PP {
			sum = add(sum, t[pp][j], send[pp][j])
		}
		trip = max(trip, sum)
	}
	return max(busiest, trip)
}

// decodeStage is one step of micro-batch mb on stage pp: one new token per
// request, the stage's work by the roofline plus its collectives.
func (s side) decodeStage(pp int, mb []Seq) time.Duration {
	act := float64(len(mb)) * float64(s.m.Hidden*s.m.ActBytes)
	var per time.Duration
	if s.l.CP > 1 {
		per += s.allreduce(s.cpMembers(mb[0].DP, pp), act)
	}
	return s.stageTime(pp, mb, decodeRows, per, s.decodeAttn, s.decodeFFN)
}

// decodeRows is the tokens a decode step puts through the FFN: one a
// request.
func decodeRows(part []Seq) float64 { return float64(len(part)) }

// decodeWork is one rank's work in one decode step of mb on stage pp
// (without attention-DP): attention and FFN together.
func (s side) decodeWork(pp int, mb []Seq) work {
	return sum(pp, mb, s.decodeAttn, s.decodeFFN)
}

// decodeAttn is the attention of one step: projections per token (not
// split over CP: each CP rank holds the weights), QK^T and AV over each
// request's context (Model.decodeCoreFLOPs per context token), reading the
// rank's KV of those contexts (split over CP).
func (s side) decodeAttn(pp int, part []Seq) work {
	return s.genAttn(pp, float64(len(part)), tokens(part))
}

// genAttn is decodeAttn for requests requests whose contexts total
// context tokens (both may be fractional: a steady state's averages).
func (s side) genAttn(pp int, requests, context float64) work {
	m := s.m
	nl := float64(s.layersOn(pp))
	cp, split := float64(s.l.CP), s.attnSplit()
	return work{flops: nl * 2 * m.attnPerRank(split) * requests, cflops: nl * m.decodeCoreFLOPs() * context / cp / split,
		weights: nl * m.attnPerRank(split) * m.WeightBytes, kv: nl * context / cp * s.kvBytesPerTokenLayer()}
}

// decodeFFN is the FFN (and on the last stage the LM head) of one step:
// one token per request.
func (s side) decodeFFN(pp int, mb []Seq) work {
	dense, moe := s.layerKinds(pp)
	b := float64(len(mb))
	w := s.ffnWork(dense, moe, b, s.ffnSplit())
	if pp == s.l.PP-1 {
		w.add(s.lmHead(b))
	}
	return w
}
