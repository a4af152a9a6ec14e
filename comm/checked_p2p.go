// Checked mode point to point: every Isend and Irecv in the flight recorder.

package comm

import (
	"context"
	"errors"
	"sync"
)

func (c *checked) Isend(buf []byte, dest, tag int) (Request, error) {
	var path Path
	path.capture()
	req, err := c.raw.Isend(buf, dest, tag)
	if err != nil {
		return nil, err
	}
	id := c.cfg.Recorder.BeginP2PAt(c.raw.Name(), KindSend, dest, tag, &path)
	return &checkedReq{Request: req, rec: c.cfg.Recorder, id: id}, nil
}

func (c *checked) Irecv(buf []byte, src, tag int) (Request, error) {
	var path Path
	path.capture()
	req, err := c.raw.Irecv(buf, src, tag)
	if err != nil {
		return nil, err
	}
	id := c.cfg.Recorder.BeginP2PAt(c.raw.Name(), KindRecv, src, tag, &path)
	return &checkedReq{Request: req, rec: c.cfg.Recorder, id: id}, nil
}

// checkedReq ends the flight record of a point-to-point request when it
// completes.
type checkedReq struct {
	Request
	rec  *Recorder
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
	if ctx.Err() == nil || err == nil {
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
