// Checked mode's failures: naming a desync (every rank's stamp and call path),
// a broken communicator, a collective that timed out (with the stall
// inspector's flight records).

package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/rankrun/rankrun/comm/flight"
	"github.com/rankrun/rankrun/comm/internal/typed"
)

// desync gathers every rank's stamp and call path and names, for each
// distinct collective, the ranks that entered it and where.
func (c *checked) desync(ctx context.Context, s [stampLen]int64) error {
	words := c.path.Words()
	c.gbuf = append(c.gbuf[:0], s[0], s[1], s[2], s[3], s[5], int64(len(words)))
	c.gbuf = append(c.gbuf, words...)
	c.gbuf = c.cfg.Recorder.AppendGuards(c.gbuf, c.cur)
	if err := c.raw.AllgatherInt64s(ctx, c.gbuf, &c.gather); err != nil {
		return fmt.Errorf("%w on group %q (gathering stamps: %v)", ErrDesync, c.raw.Name(), err)
	}
	de := &DesyncError{Group: c.raw.Name(), Self: c.raw.Rank(), WorldRanks: worldRanksOf(c.raw)}
	paths := make([]flight.Path, c.raw.Size())
	for r := range c.raw.Size() {
		v := c.gather.Of(r)
		var gs []flight.GuardValue
		ok := len(v) >= 6 && v[0] == stampMagic && v[5] >= 0 && v[5] <= flight.MaxWords && len(v) >= 6+int(v[5])
		if ok {
			var rest []int64
			gs, rest, ok = flight.ParseGuards(v[6+int(v[5]):])
			ok = ok && len(rest) == 0
		}
		if !ok {
			de.Entries = append(de.Entries, Entry{Rank: r, Site: "(not a checked collective)"})
			continue
		}
		p := &paths[r]
		p.SetWords(v[6 : 6+int(v[5])])
		de.Entries = append(de.Entries, Entry{Rank: r, Seq: uint64(v[1]), Kind: flight.Kind(v[2]), Site: p.Site(), Shape: v[4], hash: v[3], Guards: gs})
	}
	// Where the first two differing paths part (same kind and site at
	// the top, different branches below), for the reader.
	for r := 1; r < len(de.Entries); r++ {
		if de.Entries[r].hash != de.Entries[0].hash && len(paths[0].Words()) > 0 && len(paths[r].Words()) > 0 {
			de.Parted = flight.Divergence(&paths[0], &paths[r])
			break
		}
	}
	return de
}

// fail turns a backend error into the error the caller sees, marks the
// communicator broken, and ends the flight record.
func (c *checked) fail(ctx, tctx context.Context, id uint64, self Entry, err error) error {
	var bte *TimeoutError
	var me *typed.MismatchError
	switch {
	case errors.As(err, &me) && me.Site == "":
		// The backend's own round found counts that do not pair up, in
		// a collective whose stamps agreed: every rank is at this
		// sequence number and (but under AnySite) call site.
		err = c.mismatch(*me, self)
	case ctx.Err() != nil:
		err = fmt.Errorf("comm: %s #%d on group %q rank %d: %w", self.Kind, self.Seq, c.raw.Name(), c.raw.Rank(), err)
	case errors.As(err, &bte), errors.Is(err, ErrCollectiveTimeout), tctx.Err() != nil, errors.Is(err, ErrBroken):
		// The backend's bound (or our own deadline) passed, or a peer
		// gave up on this collective at its bound (in-process the first
		// rank to give up breaks the round for all): either way the
		// collective timed out.
		te := c.timeout(self, bte)
		if bte == nil && !errors.Is(err, context.DeadlineExceeded) {
			te.Cause = err
		}
		err = te
	}
	c.broken = err
	c.cfg.Recorder.End(id, err)
	return err
}

// timeout builds the error of a collective that timed out: the backend's
// own view (bte, when it gave one: which ranks never arrived) with this
// rank's stamp, and every rank's flight records from the stall inspector.
func (c *checked) timeout(self Entry, bte *TimeoutError) *TimeoutError {
	te := &TimeoutError{Group: c.raw.Name(), Self: c.raw.Rank(), Waiting: self}
	if bte != nil {
		te.Missing, te.Cause, te.Bound, te.WorldRanks = slices.Clone(bte.Missing), bte.Cause, bte.Bound, bte.WorldRanks
		te.Peers = bte.Peers
	}
	if te.WorldRanks == nil {
		te.WorldRanks = worldRanksOf(c.raw)
	}
	ins, ok := unwrap(c.raw).(inspector)
	if !ok {
		if bte == nil {
			for r := range c.raw.Size() {
				if r != self.Rank {
					te.Missing = append(te.Missing, r)
				}
			}
		}
		return te
	}
	ictx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	te.Peers = ins.InspectPeers(ictx)
	// A rank whose flight records show it entered this collective arrived,
	// if late: the culprit is a rank that never did. Where the backend
	// said who was missing at its bound, keep those of them that still
	// have not arrived (all of them, if that would leave none).
	var never []int
	for _, p := range te.Peers {
		if p.Rank == self.Rank {
			continue
		}
		arrived := false
		for _, r := range p.Records {
			if r.Group == c.raw.Name() && r.Seq >= self.Seq && r.Kind != flight.KindSend && r.Kind != flight.KindRecv {
				arrived = true
				break
			}
		}
		if !arrived && (bte == nil || bte.Missing == nil || slices.Contains(bte.Missing, p.Rank)) {
			never = append(never, p.Rank)
		}
	}
	if len(never) > 0 || bte == nil || bte.Missing == nil {
		te.Missing = never
	}
	return te
}

// mismatch is e (counts that do not pair up) with where the ranks were:
// self's sequence number and call site, which every rank's stamp shares.
func (c *checked) mismatch(e typed.MismatchError, self Entry) *typed.MismatchError {
	e.Seq, e.Site, e.AnySite = self.Seq, self.Site, c.cfg.AnySite
	if e.WorldRanks == nil {
		e.WorldRanks = worldRanksOf(c.raw)
	}
	return &e
}
