package outbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
)

// failingReceiver answers the message named by its Idempotency-Key with
// each of codes in turn, then 200; every other message gets 200 at once.
func failingReceiver(t *testing.T, codes ...int) (url string, setTarget func(string)) {
	t.Helper()
	var mu sync.Mutex
	target, seen := "", 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Idempotency-Key") == target && seen < len(codes) {
			seen++
			http.Error(w, "try later", codes[seen-1])
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func(uid string) { mu.Lock(); target = uid; mu.Unlock() }
}

// A message whose receiver fails three times keeps the three attempts in
// its history, newest first, with their status codes, errors, dispatcher
// and durations; the messages delivered at once record nothing.
func TestModesAttemptHistory(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m leaseMode) {
		b := m.bundle(t)
		url, setTarget := failingReceiver(t, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusTooManyRequests)
		ids := b.enqueueN(t, 3, "a")
		others := b.enqueueN(t, 5, "b")
		d, err := b.admin.Message(t.Context(), ids[0])
		require.NoError(t, err)
		setTarget(d.UID)
		sink, err := httpsink.New(url, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sink.Close() })
		start := b.dbNow(t)
		drain(t, b.dispatcher(t, sink, m.config(outbox.Config{Owner: "relay-1", RetryBase: time.Millisecond, RetryCap: 5 * time.Millisecond})))

		d, err = b.admin.Message(t.Context(), ids[0])
		require.NoError(t, err)
		require.Equal(t, "done", d.Status)
		require.Len(t, d.History, 3)
		for i, h := range d.History {
			require.Equal(t, outbox.OutcomeRetry, h.Outcome)
			require.Equal(t, "relay-1", h.Dispatcher)
			require.Equal(t, 3-i, h.Attempt, "newest first")
			require.Positive(t, h.Duration)
			require.WithinDuration(t, start, h.At, time.Minute)
			if i > 0 {
				require.True(t, h.At.Before(d.History[i-1].At), "newest first")
			}
		}
		require.Equal(t, []int{429, 500, 503}, []int{d.History[0].Status, d.History[1].Status, d.History[2].Status})
		require.Contains(t, d.History[2].Error, "HTTP 503 Service Unavailable: try later")
		require.Contains(t, d.History[0].Error, "HTTP 429")

		for _, id := range append(ids[1:], others...) {
			h, err := b.admin.Attempts(t.Context(), id)
			require.NoError(t, err)
			require.Empty(t, h, "a delivery records nothing")
		}
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.schema+".outbox_attempts").Scan(&n))
		require.Equal(t, 3, n, "the happy path writes no history")
	})
}

// Each message keeps its newest AttemptHistory entries; a dead message's
// last entry says so.
func TestAttemptHistoryKeepsTheNewest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueueN(t, 1, "a")[0]
	sink := outbox.SinkFunc(func(context.Context, *outbox.Message) error {
		return outbox.WithResponseStatus(outbox.Retryable(errTest("receiver down")), 502)
	})
	drain(t, b.dispatcher(t, sink, &outbox.Config{AttemptHistory: 4, MaxAttempts: 7, RetryBase: time.Millisecond, RetryCap: 2 * time.Millisecond}))
	h, err := b.admin.Attempts(t.Context(), id)
	require.NoError(t, err)
	require.Len(t, h, 4)
	require.Equal(t, outbox.OutcomeDead, h[0].Outcome)
	require.Contains(t, h[0].Error, "retries exhausted")
	for i, e := range h {
		require.Equal(t, 7-i, e.Attempt)
		require.Equal(t, 502, e.Status)
	}
	require.Equal(t, outbox.OutcomeRetry, h[3].Outcome)

	// Off: nothing recorded.
	id2 := b.enqueueN(t, 1, "b")[0]
	drain(t, b.dispatcher(t, sink, &outbox.Config{AttemptHistory: outbox.NoAttemptHistory, MaxAttempts: 2, RetryBase: time.Millisecond, RetryCap: 2 * time.Millisecond}))
	h, err = b.admin.Attempts(t.Context(), id2)
	require.NoError(t, err)
	require.Empty(t, h)
}

// Retention deletes a message's history with it.
func TestRetentionPurgesTheHistory(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m leaseMode) {
		testRetentionPurgesTheHistory(t, m)
	})
}

func testRetentionPurgesTheHistory(t *testing.T, m leaseMode) {
	b := m.bundle(t)
	ids := b.enqueueN(t, 2, "a")
	var mu sync.Mutex
	failed := map[int64]bool{}
	sink := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if !failed[m.ID] {
			failed[m.ID] = true
			return outbox.Retryable(errTest("once"))
		}
		return nil
	})
	drain(t, b.dispatcher(t, sink, m.config(outbox.Config{RetryBase: time.Millisecond, RetryCap: 2 * time.Millisecond})))
	// Old enough to go, by when it finished (or, under snapshot
	// cursors, which do not write it, by when it was created).
	b.exec(t, "UPDATE "+b.quoted+" SET done_at = now() - interval '10 days', created_at = now() - interval '10 days' WHERE id = $1", ids[0])
	_, err := b.admin.Purge(t.Context(), 7*24*time.Hour, nil)
	require.NoError(t, err)
	h, err := b.admin.Attempts(t.Context(), ids[0])
	require.NoError(t, err)
	require.Empty(t, h, "purged with its message")
	h, err = b.admin.Attempts(t.Context(), ids[1])
	require.NoError(t, err)
	require.Len(t, h, 1, "a kept message keeps its history")
}

type errTest string

func (e errTest) Error() string { return string(e) }

// A failure whose write was fenced off (the lease was taken over while the
// publish ran) records nothing: the history holds only outcomes that were
// written.
func TestModesAttemptHistoryOfALostLease(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m leaseMode) {
		b := m.bundle(t)
		ids := b.enqueueN(t, 1, "a")
		g := newGate()
		sig := newSignals()
		stalled := b.dispatcher(t, outbox.SinkFunc(func(ctx context.Context, msg *outbox.Message) error {
			g.wait(ctx, msg.ID)
			return outbox.WithResponseStatus(outbox.Retryable(errTest("late 503")), 503)
		}), m.config(outbox.Config{Lease: 30 * time.Second, Owner: "stalled", Hook: sig, PollInterval: time.Hour, DisableNotify: true}))
		start(t, stalled)
		require.Equal(t, ids[0], g.next(t))
		waitFor(t, sig.idle, func(outbox.IdleEvent) bool { return true }, "the stalled dispatcher never went idle")

		m.expire(t, b)
		drain(t, b.dispatcher(t, newRecorder(nil).Sink(), m.config(outbox.Config{Lease: 30 * time.Second, Owner: "next"})))
		g.Open()
		sig.waitSettled(t, outbox.OutcomeLeaseLost, "the stalled finalize was not fenced off")
		require.NoError(t, stalled.Stop(), "its run ends once its history writer has written what it was given")
		h, err := b.admin.Attempts(t.Context(), ids[0])
		require.NoError(t, err)
		require.Empty(t, h, "a fenced-off failure is not recorded")
	})
}
