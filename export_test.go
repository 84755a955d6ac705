package outbox

import (
	"context"
	"time"
)

// SetPaceClock replaces the clock that paces a replay, so tests check the
// waits without taking them.
func SetPaceClock(a *Admin, now func() time.Time, sleep func(context.Context, time.Duration) error) {
	a.pace = pacer{now: now, sleep: sleep}
}

// SetProbeChannel sends d's notification probe to channel instead of the
// one it listens on, so the probe never arrives.
func SetProbeChannel(d *Dispatcher, channel string) { d.probeTo = channel }
