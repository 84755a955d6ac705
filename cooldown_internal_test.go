package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCooldown(t *testing.T) {
	t.Parallel()

	t.Run("CheapClaimsPauseBriefly", func(t *testing.T) {
		t.Parallel()
		c := cooldown{max: 50 * time.Millisecond}
		require.Equal(t, 50*time.Millisecond, c.pause(), "before any claim the full cooldown applies")
		for range 10 {
			c.claimed(500*time.Microsecond, 3, false)
		}
		require.Equal(t, time.Millisecond, c.pause())
		require.Equal(t, time.Millisecond, c.spacing())
	})

	t.Run("SlowClaimsPauseUpToTheCooldown", func(t *testing.T) {
		t.Parallel()
		c := cooldown{max: 50 * time.Millisecond}
		c.claimed(10*time.Millisecond, 3, false)
		require.Equal(t, 20*time.Millisecond, c.pause())
		c.claimed(200*time.Millisecond, 3, false)
		require.Equal(t, 50*time.Millisecond, c.pause())
	})

	t.Run("EmptyWakeUpsBackOffRegistration", func(t *testing.T) {
		t.Parallel()
		c := cooldown{max: 50 * time.Millisecond}
		c.claimed(500*time.Microsecond, 1, false)
		c.claimed(500*time.Microsecond, 0, true)
		first := c.spacing()
		c.claimed(500*time.Microsecond, 0, true)
		require.Greater(t, c.spacing(), first, "an empty wake-up did not lengthen the spacing")
		for range 10 {
			c.claimed(500*time.Microsecond, 0, true)
		}
		require.Equal(t, 50*time.Millisecond, c.spacing())
		require.Equal(t, time.Millisecond, c.pause(), "the back-off delays registration, not claims")
		c.claimed(500*time.Microsecond, 2, true)
		require.Equal(t, time.Millisecond, c.spacing(), "a wake-up that found rows did not end the back-off")
	})
}
