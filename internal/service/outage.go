package service

import (
	"log/slog"
	"time"
)

// OutageReminder is how often a failure that goes on is logged again.
const OutageReminder = time.Minute

// Outage follows a run of failures of an operation retried in a loop (a
// claim, a renewal) so that an outage is logged as it begins, as it goes
// on once a minute, and as it ends, rather than at every retry: a database
// down for a minute would otherwise write a line per retry. The zero value
// is ready; it is not safe for concurrent use.
type Outage struct {
	since   time.Time
	tries   int
	lastErr string
	lastLog time.Time
}

// Failed records a failure at now and returns the level to log it at:
// loud for the first failure and for one whose error text differs from
// the last logged, Warn once per OutageReminder while the same error goes
// on, Debug otherwise.
func (o *Outage) Failed(now time.Time, err error, loud slog.Level) slog.Level {
	o.tries++
	text := err.Error()
	switch {
	case o.tries == 1:
		o.since = now
		fallthrough
	case text != o.lastErr:
		o.lastErr, o.lastLog = text, now
		return loud
	case now.Sub(o.lastLog) >= OutageReminder:
		o.lastLog = now
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// Down reports whether the last try failed, since when and how many tries
// have failed.
func (o *Outage) Down() (since time.Time, tries int, down bool) {
	return o.since, o.tries, o.tries > 0
}

// Recovered records a success at now. ended is true when it ends an outage,
// which lasted took over tries failures.
func (o *Outage) Recovered(now time.Time) (took time.Duration, tries int, ended bool) {
	if o.tries == 0 {
		return 0, 0, false
	}
	took, tries = now.Sub(o.since), o.tries
	*o = Outage{}
	return took, tries, true
}
