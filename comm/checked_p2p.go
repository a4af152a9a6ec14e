// Checked mode point to point: every Isend and Irecv in the flight recorder.

package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rankrun/rankrun/comm/flight"
)

func (c *checked) Isend(buf []byte, dest, tag int) (Request, error) {
	var path flight.Path
	path.Capture()
	req, err := c.raw.Isend(buf, dest, tag)
	if err != nil {
		return nil, err
	}
	id := c.cfg.Recorder.BeginP2PAt(c.raw.Name(), flight.KindSend, dest, tag, &path)
	return &checkedReq{Request: req, rec: c.cfg.Recorder, id: id}, nil
}

func (c *checked) Irecv(buf []byte, src, tag int) (Request, error) {
	var path flight.Path
	path.Capture()
	req, err := c.raw.Irecv(buf, src, tag)
	if err != nil {
		return nil, err
	}
	id := c.cfg.Recorder.BeginP2PAt(c.raw.Name(), flight.KindRecv, src, tag, &path)
	return &checkedReq{Request: req, rec: c.cfg.Recorder, id: id}, nil
}

// LendsBytes implements Lender: what the backend underneath does.
func (c *checked) LendsBytes() bool {
	l, ok := c.raw.(Lender)
	return ok && l.LendsBytes()
}

// VectorIO implements Vectored: what the backend underneath does.
func (c *checked) VectorIO() bool {
	v, ok := c.raw.(Vectored)
	return ok && v.VectorIO()
}

// partsSender is the raw backend's IsendParts, which a Lender and a
// Vectored backend both have.
func (c *checked) partsSender() (interface {
	IsendParts(parts [][]byte, dest, tag int) (Request, error)
}, bool) {
	if c.LendsBytes() {
		return c.raw.(Lender), true
	}
	if c.VectorIO() {
		return c.raw.(Vectored), true
	}
	return nil, false
}

// IsendParts implements Lender and Vectored, recorded as a send.
func (c *checked) IsendParts(parts [][]byte, dest, tag int) (Request, error) {
	l, ok := c.partsSender()
	if !ok {
		return nil, fmt.Errorf("%w: IsendParts: backend %T neither lends bytes nor sends from parts", ErrBadArgument, c.raw)
	}
	var path flight.Path
	path.Capture()
	req, err := l.IsendParts(parts, dest, tag)
	if err != nil {
		return nil, err
	}
	id := c.cfg.Recorder.BeginP2PAt(c.raw.Name(), flight.KindSend, dest, tag, &path)
	return &checkedReq{Request: req, rec: c.cfg.Recorder, id: id}, nil
}

// IrecvLoan implements Lender, recorded as a receive.
func (c *checked) IrecvLoan(src, tag int) (Loan, error) {
	l, ok := c.raw.(Lender)
	if !ok || !l.LendsBytes() {
		return nil, fmt.Errorf("%w: IrecvLoan: backend %T does not lend bytes", ErrBadArgument, c.raw)
	}
	var path flight.Path
	path.Capture()
	req, err := l.IrecvLoan(src, tag)
	if err != nil {
		return nil, err
	}
	id := c.cfg.Recorder.BeginP2PAt(c.raw.Name(), flight.KindRecv, src, tag, &path)
	return &checkedLoan{checkedReq: checkedReq{Request: req, rec: c.cfg.Recorder, id: id}, loan: req}, nil
}

// IrecvParts implements Vectored, recorded as a receive.
func (c *checked) IrecvParts(parts [][]byte, src, tag int) (Request, error) {
	if !c.VectorIO() {
		return nil, fmt.Errorf("%w: IrecvParts: backend %T does not receive into parts", ErrBadArgument, c.raw)
	}
	var path flight.Path
	path.Capture()
	req, err := c.raw.(Vectored).IrecvParts(parts, src, tag)
	if err != nil {
		return nil, err
	}
	id := c.cfg.Recorder.BeginP2PAt(c.raw.Name(), flight.KindRecv, src, tag, &path)
	return &checkedReq{Request: req, rec: c.cfg.Recorder, id: id}, nil
}

// checkedLoan is a recorded loan.
type checkedLoan struct {
	checkedReq
	loan Loan
}

func (l *checkedLoan) Parts() [][]byte { return l.loan.Parts() }
func (l *checkedLoan) Release()        { l.loan.Release() }

// checkedReq ends the flight record of a point-to-point request when it
// completes.
type checkedReq struct {
	Request
	rec  *flight.Recorder
	id   uint64
	once sync.Once
}

func (r *checkedReq) Test() (Status, bool, error) {
	st, done, err := r.Request.Test()
	if done {
		r.once.Do(func() { r.rec.End(r.id, err) })
	}
	return st, done, err
}

func (r *checkedReq) Wait(ctx context.Context) (Status, error) {
	st, err := r.Request.Wait(ctx)
	if err == nil || ctx.Err() == nil && !errors.Is(err, ErrWaitTimeout) {
		// Ended (a context error or a wait past its bound leaves the
		// request in flight: its record stays open).
		r.once.Do(func() { r.rec.End(r.id, err) })
	}
	return st, err
}

func (r *checkedReq) Cancel() error {
	err := r.Request.Cancel()
	if err == nil {
		r.once.Do(func() { r.rec.End(r.id, errors.New("cancelled")) })
	}
	return err
}
