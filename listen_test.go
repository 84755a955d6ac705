package outbox_test

import (
	"context"
	"sync/atomic"
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

// An idle dispatcher that notifications wake backs its polls off, up to
// IdlePollMax, keeping its waiter row meanwhile: a commit still wakes it
// at once, and a message it deferred goes out when due, not at the next
// poll.
func TestIdlePollsBackOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const deferFor = 3500 * time.Millisecond
	var deferred atomic.Bool
	delivered := make(chan time.Time, 4)
	rec := newRecorder(func(context.Context, *outbox.Message) error {
		if !deferred.Swap(true) {
			return outbox.Defer(deferFor, "later")
		}
		delivered <- time.Now()
		return nil
	})
	sig := newSignals()
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{PollInterval: 50 * time.Millisecond, IdlePollMax: 3 * time.Second, Hook: sig})
	start(t, d)
	waitFor(t, sig.idle, func(ev outbox.IdleEvent) bool { return ev.Registered && ev.Wait >= 2400*time.Millisecond },
		"the idle waits never grew to IdlePollMax")
	var waiters int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.schema+".outbox_waiters").Scan(&waiters))
	require.Equal(t, 1, waiters, "registered while backed off")

	sent := time.Now()
	b.enqueueN(t, 1, "a")
	waitFor(t, sig.settles, func(ev outbox.SettleEvent) bool { return ev.Outcome == outbox.OutcomeDefer }, "never deferred")
	require.Less(t, time.Since(sent), 2*time.Second, "woken by the commit, not by a poll 2.4s to 3.6s away")
	deferredAt := time.Now()
	select {
	case at := <-delivered:
		// The polls after the deferral come 0.05, 0.15, ... 1.55 and about
		// 3.15 s after it, the next one about 3 s later.
		require.Less(t, at.Sub(deferredAt), deferFor+time.Second, "went out when due, not at the next poll")
	case <-time.After(20 * time.Second):
		require.FailNow(t, "the deferred message never went out")
	}
}
