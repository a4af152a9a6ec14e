package costmodel

import "time"

// prefill is the time of one prefill of batch by this side's executor
// group: the batch's micro-batches through the PP stages, each stage's
// work by the roofline plus its collectives, finished when the last
// micro-batch leaves the last stage (a pipeline with no bound on what waits
// between stages: finish[pp][j] = max(finish[pp-1][j] + send, finish[pp][j-1]) + t).
func (s side) prefill(batch []Seq) time.Duration {
	if len(batch) == 0 {
		return 0
	}
	mbs := s.micro(batch)
	t, send := s.stageTimes(mbs, s.prefillStage)
	prev := make([]time.Duration, len(mbs)) // finish times on the previous stage
	for pp := range s.l.PP {
		var free time.Duration // when stage pp is free
		for j := range mbs {
			ready := time.Duration(0)
			if pp > 0 {
				ready = add(prev[j], send[pp-1][j])
			}
			free = add(max(ready, free), t[pp][j])
			prev[j] = free
		}
	}
	return prev[len(mbs)-1]
}

// prefillStage is micro-batch mb on stage pp: the stage's work by the
// roofline plus its collectives (per layer: two TP allreduces of the
// activations, or ffnCollectives under attention-DP; a CP allgather of
// the layer's KV).
func (s side) prefillStage(pp int, mb []Seq) time.Duration {
	all := tokens(mb)
	var per time.Duration
	if s.l.CP > 1 {
		per += s.allgather(s.cpMembers(mb[0].DP, pp), all*s.kvBytesPerTokenLayer())
	}
	rows := func(part []Seq) float64 { return tokens(part) / float64(s.l.CP) }
	return s.stageTime(pp, mb, rows, per, s.prefillAttn, s.prefillFFN)
}

// prefillWork is one rank's work prefilling mb on stage pp (without
// attention-DP).
func (s side) prefillWork(pp int, mb []Seq) work {
	return sum(pp, mb, s.prefillAttn, s.prefillFFN)
}

// prefillAttn is the attention of a prefill: projections 2*A FLOPs per
// token, causal QK^T and AV Heads*(qkDim+HeadDim)*n*(n+1) per request of n
// tokens (n*(2p+n+1) for a chunk of n after p earlier ones), per layer,
// all split over CP; the weights read once, the KV written (and a chunk's
// earlier KV read).
func (s side) prefillAttn(pp int, part []Seq) work {
	m := s.m
	nl := float64(s.layersOn(pp))
	var core, past float64
	for _, q := range part {
		n, p := float64(q.Tokens), float64(q.Past)
		core += float64(m.Heads) * (m.qkDim() + float64(m.HeadDim)) * n * (2*p + n + 1)
		past += p
	}
	t, cp, split := tokens(part), float64(s.l.CP), s.attnSplit()
	return work{flops: nl * 2 * m.attnPerRank(split) * t / cp, cflops: nl * core / (split * cp),
		weights: nl * m.attnPerRank(split) * m.WeightBytes, kv: nl * (t + past) / cp * s.kvBytesPerTokenLayer()}
}

// prefillFFN is the FFN of a prefill over every token (split over the FFN's
// ranks and CP) and, on the last stage, the LM head for each request's last
// token (none for a chunk that does not end its prompt).
func (s side) prefillFFN(pp int, mb []Seq) work {
	dense, moe := s.layerKinds(pp)
	w := s.ffnWork(dense, moe, tokens(mb), s.ffnSplit()*float64(s.l.CP))
	if pp == s.l.PP-1 {
		sampled := 0
		for _, q := range mb {
			if !q.Partial {
				sampled++
			}
		}
		if sampled > 0 {
			w.add(s.lmHead(float64(sampled)))
		}
	}
	return w
}
