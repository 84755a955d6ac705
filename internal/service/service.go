// Package service is the one lifecycle of everything outboxd runs in the
// background (the dispatcher, its listener and heartbeat, retention, the
// metrics refresher): a loop that runs until its context ends, started and
// stopped through a [Runner].
package service

import (
	"context"
	"errors"
	"sync"
)

// ErrRunning is returned by [Runner.Start] while the service runs.
var ErrRunning = errors.New("already started")

// Runner runs one loop at a time. Start launches it; Stop cancels its
// context and waits for it to return. A loop that ended on its own (its
// parent context ended) may be started again. The zero value is ready.
type Runner struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop returned; nil before Start
	err    error         // what the loop returned
}

// Start runs loop in a goroutine with a context derived from ctx. It
// returns [ErrRunning] if a loop started earlier has not returned.
func (r *Runner) Start(ctx context.Context, loop func(context.Context) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		select {
		case <-r.done:
		default:
			return ErrRunning
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.cancel, r.done, r.err = cancel, done, nil
	go func() {
		err := loop(ctx)
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		cancel()
		close(done)
	}()
	return nil
}

// Stop cancels the loop's context, waits for it to return and returns its
// error. It is safe to call before Start and more than once: a Runner with
// no loop returns nil.
func (r *Runner) Stop() error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.err
	r.cancel, r.done, r.err = nil, nil, nil
	return err
}

// Done is closed once the running loop has returned; nil before Start.
func (r *Runner) Done() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}
