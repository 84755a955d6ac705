package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// A listener that loses its connection must not stop delivery: the
// dispatcher polls meanwhile, and the listener reconnects so wake-ups
// resume.
func TestListenerFailureDoesNotStopDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	delivered := make(chan time.Time, 10)
	rec := newRecorder(func(context.Context, *outbox.Message) error {
		delivered <- time.Now()
		return nil
	})
	sig := newSignals()
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{PollInterval: 2 * time.Second, Hook: sig})
	start(t, d)
	waitIdle(t, sig)

	channel := b.schema + ".outbox"
	listenerPID := func() int {
		var pid int
		err := b.pool.QueryRow(t.Context(),
			`SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN ' || quote_ident($1)`, channel).Scan(&pid)
		if err != nil {
			return 0
		}
		return pid
	}
	pid := listenerPID()
	require.NotZero(t, pid, "no LISTEN session found")
	var killed bool
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", pid).Scan(&killed))
	require.True(t, killed)

	// Delivery goes on while the listener is down (by polling at worst).
	ids := b.enqueueN(t, 1, "a")
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "delivery stopped after the listener failed")
	}
	require.Equal(t, ids, rec.IDs())

	// The listener comes back on a new session and wakes the dispatcher again.
	require.Eventually(t, func() bool { p := listenerPID(); return p != 0 && p != pid },
		10*time.Second, 20*time.Millisecond, "listener did not reconnect")
	discard(sig.idle)
	waitIdle(t, sig)
	wakeups := d.Stats().Wakeups
	sent := time.Now()
	b.enqueueN(t, 1, "b")
	select {
	case got := <-delivered:
		require.Less(t, got.Sub(sent), time.Second, "delivery waited for the poll after the listener reconnected")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "not delivered after the listener reconnected")
	}
	require.Greater(t, d.Stats().Wakeups, wakeups)
}
