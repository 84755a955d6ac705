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
