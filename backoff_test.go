package outbox_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

func TestFullJitter(t *testing.T) {
	t.Parallel()

	t.Run("WithinFloorAndCeiling", func(t *testing.T) {
		t.Parallel()
		const base, maxDelay = 10 * time.Millisecond, time.Second
		for _, floor := range []time.Duration{0, 15 * time.Millisecond, 2 * time.Second} {
			for attempt := range 12 {
				ceiling := min(maxDelay, base<<attempt)
				var sawAboveFloor bool
				for range 200 {
					d := outbox.FullJitter(attempt, base, maxDelay, floor)
					require.GreaterOrEqual(t, d, floor, "attempt %d", attempt)
					require.LessOrEqual(t, d, max(ceiling, floor), "attempt %d", attempt)
					sawAboveFloor = sawAboveFloor || d > floor
				}
				if ceiling > 2*floor {
					require.True(t, sawAboveFloor, "attempt %d: no jitter above the floor", attempt)
				}
			}
		}
	})

	t.Run("Attempt100DoesNotOverflow", func(t *testing.T) {
		t.Parallel()
		for _, maxDelay := range []time.Duration{5 * time.Minute, math.MaxInt64 / 3, math.MaxInt64} {
			var sawLarge bool
			for range 100 {
				d := outbox.FullJitter(100, time.Second, maxDelay, 0)
				require.GreaterOrEqual(t, d, time.Duration(0), "cap %d", maxDelay)
				require.LessOrEqual(t, d, maxDelay, "cap %d", maxDelay)
				// Each draw is uniform over [0, cap]: 100 draws all at most
				// cap/100 has probability 1e-200.
				sawLarge = sawLarge || d > maxDelay/100
			}
			require.True(t, sawLarge, "cap %d: attempt 100 never backed off near the cap", maxDelay)
		}
	})

	t.Run("ZeroBase", func(t *testing.T) {
		t.Parallel()
		require.Zero(t, outbox.FullJitter(3, 0, time.Minute, 0))
		require.Equal(t, time.Second, outbox.FullJitter(3, 0, time.Minute, time.Second))
	})
}
