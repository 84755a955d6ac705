package outbox

import "time"

// Hook observes a dispatcher: claims, finalizes and the outcome of every
// message. It is how metrics systems are fed without this package importing
// any (see the metrics package for Prometheus). Methods are called from the
// dispatcher's goroutines, concurrently, on the hot path: they must be safe
// for concurrent use and return quickly. Embed [BaseHook] to implement only
// some methods and stay compatible when methods are added.
type Hook interface {
	// OnClaim follows every claim statement.
	OnClaim(ClaimEvent)
	// OnFinalize follows every finalize statement: each failed try that
	// will be retried (Retrying), then the batch's result.
	OnFinalize(FinalizeEvent)
	// OnSettle reports each message's outcome once its fenced write has
	// been attempted: Outcome is OutcomeLeaseLost when the fence did not hold.
	OnSettle(SettleEvent)
	// OnHeartbeat follows every lease-extending heartbeat statement.
	OnHeartbeat(HeartbeatEvent)
	// OnSinkPause reports the sink paused (it reported [Unavailable]) and
	// resumed (it answered a probe otherwise).
	OnSinkPause(SinkPauseEvent)
	// OnIdle reports the claim loop going to sleep because nothing was
	// claimable.
	OnIdle(IdleEvent)
}

// BaseHook implements [Hook] with methods that do nothing.
type BaseHook struct{}

func (BaseHook) OnClaim(ClaimEvent)         {}
func (BaseHook) OnFinalize(FinalizeEvent)   {}
func (BaseHook) OnSettle(SettleEvent)       {}
func (BaseHook) OnHeartbeat(HeartbeatEvent) {}
func (BaseHook) OnSinkPause(SinkPauseEvent) {}
func (BaseHook) OnIdle(IdleEvent)           {}

// IdleEvent describes the claim loop going to sleep after a claim found
// nothing claimable. It sleeps until a wake-up, a freed aggregate head (in
// ordered mode) or Wait, the poll interval, whichever comes first.
type IdleEvent struct {
	// Registered is whether producers' commits will wake it: the
	// listener is up and the dispatcher's waiter row is registered. When
	// false, the next claim comes after Wait at the latest.
	Registered bool
	Wait       time.Duration
}

// SinkPauseEvent describes the sink pausing or resuming. While paused the
// dispatcher claims nothing, releases rows it has not started (attempt
// refunded), and claims one row as a probe after Pause.
type SinkPauseEvent struct {
	Paused bool
	// Pause is how long until the probe; Err what the sink reported.
	Pause time.Duration
	Err   error
}

// ClaimEvent describes one claim statement.
type ClaimEvent struct {
	Rows     int
	Duration time.Duration
	Err      error
}

// FinalizeEvent describes one finalize statement.
type FinalizeEvent struct {
	// Rows is how many outcomes the statement carried; LeaseLost how many of
	// them were fenced off.
	Rows, LeaseLost int
	Duration        time.Duration
	Err             error
	// Retrying is set on a failed try that will be tried again while the
	// batch's leases may still hold; the batch's result follows later.
	Retrying bool
}

// HeartbeatEvent describes one heartbeat statement.
type HeartbeatEvent struct {
	// Rows is how many leases it tried to extend; LeaseLost how many were
	// already lost (their publishes are cancelled).
	Rows, LeaseLost int
	// Hung is how many publishes this heartbeat newly found running past
	// PublishTimeout plus one HeartbeatInterval (a sink that ignores its
	// context): their leases are no longer extended. An event with only
	// Hung set ran no statement.
	Hung     int
	Duration time.Duration
	Err      error
}

// Outcome is what became of one claimed message. It is the one vocabulary
// of outcomes: [Stats] counts them, [SettleEvent] carries them, log lines
// and the metrics package's outcome label spell them the same way.
type Outcome string

// Outcomes.
const (
	OutcomeDone      Outcome = "done"
	OutcomeRetry     Outcome = "retry"
	OutcomeDefer     Outcome = "defer"
	OutcomeDead      Outcome = "dead"
	OutcomeReleased  Outcome = "released"
	OutcomeLeaseLost Outcome = "lease_lost"
)

// outcomes lists every Outcome.
var outcomes = [...]Outcome{OutcomeDone, OutcomeRetry, OutcomeDefer, OutcomeDead, OutcomeReleased, OutcomeLeaseLost}

// Outcomes returns every [Outcome], for a metrics system to initialise one
// series per outcome.
func Outcomes() []Outcome { return append([]Outcome(nil), outcomes[:]...) }

// index is o's position in outcomes (-1 for an unknown outcome).
func (o Outcome) index() int {
	for i, x := range outcomes {
		if x == o {
			return i
		}
	}
	return -1
}

// SettleEvent describes one message's outcome.
type SettleEvent struct {
	Message *Message
	Outcome Outcome
	// PublishDuration is how long Publish took; zero if it was not called
	// (a released message).
	PublishDuration time.Duration
	// Lag is the time from created_at to this outcome, on the database's
	// clock: the delivery lag for a done message.
	Lag time.Duration
	// Err is the publish error, if any.
	Err error
}
