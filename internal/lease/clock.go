package lease

import "time"

// Clock is the time the lease modes and the registry read: the wall clock
// when nil, or one a test sets and moves.
type Clock func() time.Time

// Now is the clock's time.
func (c Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return c()
}

// Since is the time elapsed since t on the clock.
func (c Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
