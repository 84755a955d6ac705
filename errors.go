package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/store"
)

// ErrLeaseLost reports that a fenced write matched no row: the lease this
// worker held was taken over (or the row was reaped), so the write was
// dropped rather than overwrite the newer owner's state.
var ErrLeaseLost = lease.ErrLost

// ErrNotFound reports that an admin operation named a row that does not exist
// or is not in the state the operation needs.
var ErrNotFound = errors.New("outbox: not found")

// ErrTableMissing reports that the outbox table does not exist; run migrate.
var ErrTableMissing = store.ErrTableMissing

// ErrTableOutdated reports that the table was created by an older version
// and lacks columns this one reads; run migrate, which upgrades it in place.
var ErrTableOutdated = store.ErrTableOutdated

// RetryableError is a transient failure: the message goes back to pending
// after a backoff and consumes an attempt. Build one with [Retryable] or
// [RetryableAfter].
type RetryableError struct {
	Err error
	// After is a lower bound on the backoff (e.g. from a Retry-After header).
	// Zero means no floor.
	After time.Duration
}

func (e *RetryableError) Error() string {
	if e.After > 0 {
		return fmt.Sprintf("retryable (after %s): %v", e.After, e.Err)
	}
	return fmt.Sprintf("retryable: %v", e.Err)
}

func (e *RetryableError) Unwrap() error { return e.Err }

// Retryable marks err as transient: timeouts, 5xx, 429, broken connections.
func Retryable(err error) error { return &RetryableError{Err: orUnknown(err)} }

// RetryFloorMax is the longest least delay a [RetryableAfter] (or an
// [UnavailableError]'s After) may impose, unless the dispatcher's RetryCap is
// longer: a longer request is cut to it, so a sink (or a server's
// Retry-After) asking for years cannot park a message for years.
const RetryFloorMax = time.Hour

// RetryableAfter is [Retryable] with a minimum delay before the next attempt,
// cut to [RetryFloorMax] (or the dispatcher's RetryCap, if longer).
func RetryableAfter(err error, after time.Duration) error {
	return &RetryableError{Err: orUnknown(err), After: max(after, 0)}
}

// PermanentError is a failure that retrying cannot fix (a validation error,
// a destination that does not exist): the message goes dead at once.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return fmt.Sprintf("permanent: %v", e.Err) }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as permanent.
func Permanent(err error) error { return &PermanentError{Err: orUnknown(err)} }

// DeferError says the message cannot be delivered yet for a business reason
// (a resource it depends on does not exist yet). The message goes back to
// pending after Delay without consuming an attempt, unless it is older than
// the dispatcher's DeferMaxAge, in which case it goes dead. A Delay past
// what DeferMaxAge still allows the message is cut to it: the message comes
// back when it reaches its maximum age, and a further defer sends it dead.
type DeferError struct {
	// Delay before the next attempt. Zero means the dispatcher's DeferDelay.
	Delay  time.Duration
	Reason string
}

func (e *DeferError) Error() string { return "deferred: " + e.Reason }

// Defer returns a [DeferError].
func Defer(delay time.Duration, reason string) error {
	return &DeferError{Delay: max(delay, 0), Reason: reason}
}

// UnavailableError reports that the sink as a whole cannot deliver right now
// for a reason of its connection, not of the message: authentication or
// authorization refused, a certificate expired or untrusted. Such a failure
// does not spend the message's attempt (a credential rotation must not send
// healthy messages dead). The dispatcher pauses the sink: it stops claiming
// and probes with one message after [SinkPauseMin], doubling the pause on
// each refusal up to [SinkPauseMax], or after After when that is longer
// (cut like a [RetryableAfter]'s). The refused message is due again just
// before the probe. Build one with [Unavailable].
type UnavailableError struct {
	Err   error
	After time.Duration
}

func (e *UnavailableError) Error() string { return fmt.Sprintf("sink unavailable: %v", e.Err) }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable marks err as a condition of the sink's connection (credentials,
// permissions, certificates) rather than of the message.
func Unavailable(err error) error { return &UnavailableError{Err: orUnknown(err)} }

// IsUnavailable reports whether err is, or wraps, an [UnavailableError].
func IsUnavailable(err error) bool {
	var e *UnavailableError
	return errors.As(err, &e)
}

// IsRetryable reports whether err is, or wraps, a [RetryableError].
func IsRetryable(err error) bool {
	var e *RetryableError
	return errors.As(err, &e)
}

// IsPermanent reports whether err is, or wraps, a [PermanentError].
func IsPermanent(err error) bool {
	var e *PermanentError
	return errors.As(err, &e)
}

// IsDefer reports whether err is, or wraps, a [DeferError].
func IsDefer(err error) bool {
	var e *DeferError
	return errors.As(err, &e)
}

// IsLeaseLost reports whether err is, or wraps, [ErrLeaseLost].
func IsLeaseLost(err error) bool { return errors.Is(err, ErrLeaseLost) }

func orUnknown(err error) error {
	if err == nil {
		return errors.New("unknown error")
	}
	return err
}
