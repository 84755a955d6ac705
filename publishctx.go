package outbox

import (
	"context"
	"errors"
	"sync"
	"time"
)

// publishCtx is the context of one publish: the dispatcher's values
// without its cancellation (in-flight publishes finish on shutdown), ended
// at its deadline or by a cancel with a cause (a keeper that found the
// lease lost). It does what WithoutCancel, WithCancelCause and WithTimeout
// stacked would, for less: the stack costs three contexts, a parent-child
// link and a timer per message, which with a fast sink was a fifth of the
// relay's CPU. Here the timer is armed only when the sink asks for Done; a
// sink that hands the message over without waiting on its context never
// starts one, and Err still reports the deadline once it has passed.
//
// The cancellation itself is a standard cancel context underneath, so
// context.Cause reports the cause (ErrLeaseLost, or DeadlineExceeded at
// the deadline) and contexts derived from this one are cancelled with it.
type publishCtx struct {
	context.Context // WithCancelCause(WithoutCancel(parent))
	cancel          context.CancelCauseFunc
	deadline        time.Time

	mu    sync.Mutex
	timer *time.Timer
	ended bool
}

func newPublishCtx(parent context.Context, timeout time.Duration) *publishCtx {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	return &publishCtx{Context: ctx, cancel: cancel, deadline: time.Now().Add(timeout)}
}

func (p *publishCtx) Deadline() (time.Time, bool) { return p.deadline, true }

// Done arms the deadline's timer the first time it is asked for.
func (p *publishCtx) Done() <-chan struct{} {
	p.mu.Lock()
	if p.timer == nil && !p.ended {
		p.timer = time.AfterFunc(time.Until(p.deadline), p.expire)
	}
	p.mu.Unlock()
	return p.Context.Done()
}

// Err is DeadlineExceeded once the deadline has passed, armed or not, and
// Canceled after a cancel.
func (p *publishCtx) Err() error {
	if p.Context.Err() == nil {
		if time.Now().Before(p.deadline) {
			return nil
		}
		p.expire()
	}
	if errors.Is(context.Cause(p.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return context.Canceled
}

func (p *publishCtx) expire() { p.cancel(context.DeadlineExceeded) }

// end releases the context once the publish returned. A deadline that
// passed unobserved is recorded first, so Err still tells it.
func (p *publishCtx) end() {
	_ = p.Err()
	p.mu.Lock()
	p.ended = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	p.cancel(context.Canceled)
}

// timedOut reports whether the publish ran into its deadline.
func (p *publishCtx) timedOut() bool {
	return errors.Is(p.Err(), context.DeadlineExceeded)
}

// deadlineError is a sink's error for a publish that ran into its
// deadline and answered with the error of a context it derived from the
// publish's: such a context reports a cancel (its Cause is the deadline),
// and the error is still to be classified as a timeout.
type deadlineError struct{ error }

func (e deadlineError) Unwrap() error { return e.error }

func (e deadlineError) Is(target error) bool { return target == context.DeadlineExceeded }
