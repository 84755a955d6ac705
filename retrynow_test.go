package outbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// A message waiting out a long backoff is delivered at once after
// RetryNow, which is audited; one not waiting is left alone.
func TestModesRetryNow(t *testing.T) {
	t.Parallel()
	testRetryNow(t, false)
}

// Without notifications (--no-notify, or a listener not yet connected
// when RetryNow ran), a dispatcher that knows a message to wait an hour
// looks again every few polls: it delivered it an hour later before.
func TestModesRetryNowWithoutNotifications(t *testing.T) {
	t.Parallel()
	testRetryNow(t, true)
}

func testRetryNow(t *testing.T, noNotify bool) {
	forEachMode(t, func(t *testing.T, m leaseMode) {
		b := m.bundle(t)
		ids := append(b.enqueueN(t, 1, "a"), b.enqueueN(t, 1, "b")...) // two aggregates: ordered, b does not wait for a
		var failed atomic.Bool
		rec := newRecorder(func(_ context.Context, msg *outbox.Message) error {
			if msg.ID == ids[0] && failed.CompareAndSwap(false, true) {
				return outbox.RetryableAfter(errors.New("receiver busy"), time.Hour)
			}
			return nil
		})
		d := b.dispatcher(t, rec.Sink(), m.config(outbox.Config{Owner: "r", RetryCap: time.Hour, RetryBase: time.Hour, DisableNotify: noNotify}))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		defer func() { cancel(); require.NoError(t, <-done) }()
		rec.waitLen(t, 2, 10*time.Second)

		// It waits an hour; the other one is delivered.
		var msg *outbox.MessageDetail
		require.Eventually(t, func() bool {
			var err error
			msg, err = b.admin.Message(t.Context(), ids[0])
			require.NoError(t, err)
			return msg.Status == "pending" && len(msg.History) == 1
		}, 10*time.Second, 20*time.Millisecond)
		require.True(t, msg.AvailableAt.After(b.dbNow(t).Add(50*time.Minute)), "due in an hour: %s", msg.AvailableAt)

		moved, err := b.admin.RetryNow(t.Context(), "ops@example.com", ids[0], ids[1])
		require.NoError(t, err)
		require.Equal(t, []int64{ids[0]}, moved, "only the waiting one moves")
		rec.waitLen(t, 3, 10*time.Second, "delivered at once, not in an hour")
		require.Equal(t, ids[0], rec.IDs()[2])
		require.Eventually(t, func() bool {
			msg, err = b.admin.Message(t.Context(), ids[0])
			require.NoError(t, err)
			return msg.Status == "done"
		}, 10*time.Second, 20*time.Millisecond)

		audit, err := b.admin.AuditList(t.Context(), 1)
		require.NoError(t, err)
		require.Len(t, audit, 1)
		require.Equal(t, outbox.AuditRetryNow, audit[0].Action)
		require.Equal(t, "ops@example.com", audit[0].Actor)
		require.EqualValues(t, 1, audit[0].Count)

		moved, err = b.admin.RetryNow(t.Context(), "", ids[0])
		require.NoError(t, err)
		require.Empty(t, moved, "a delivered message does not wait")
	})
}
