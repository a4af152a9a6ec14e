package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rankrun/rankrun/executor"
)

// interruptError is the cause of a run ended by SIGINT or SIGTERM: the
// report is partial and the exit code is 128 + the signal's number (130,
// 143), as a shell reports a process the signal ended.
type interruptError struct{ sig syscall.Signal }

func (e interruptError) Error() string   { return fmt.Sprintf("interrupted by %s", signalName(e.sig)) }
func (e interruptError) Is(t error) bool { return t == executor.ErrInterrupted }
func (e interruptError) code() int       { return 128 + int(e.sig) }

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// interruptible returns a context that SIGINT or SIGTERM cancels with an
// interruptError as its cause. After the first signal the default action
// is back, so a second one ends the process at once. stop releases the
// signals and waits for the watcher goroutine to end.
func interruptible(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-ch:
			signal.Stop(ch)
			sig, _ := s.(syscall.Signal)
			cancel(interruptError{sig: sig})
		case <-quit:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(quit)
		<-done
		cancel(nil)
	}
}

// interrupted is the interruptError behind err or ctx's cause, if any.
func interrupted(ctx context.Context, err error) (interruptError, bool) {
	var ie interruptError
	if errors.As(context.Cause(ctx), &ie) {
		return ie, true
	}
	return ie, errors.As(err, &ie)
}
