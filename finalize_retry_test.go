package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// A finalize that fails while the database is briefly unusable is retried
// while the leases hold, so a successful publish is recorded rather than
// re-delivered.
func TestFinalizeRetriesWhileLeasesHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 1, "a")
	away := pgx.Identifier{b.schema, "outbox_away"}.Sanitize()
	published := make(chan struct{})
	rec := newRecorder(func(ctx context.Context, m *outbox.Message) error {
		// The table disappears between the publish and its finalize.
		b.exec(t, "ALTER TABLE "+b.quoted+" RENAME TO outbox_away")
		close(published)
		return nil
	})
	sig := newSignals()
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{Lease: 20 * time.Second, DisableNotify: true, PollInterval: time.Hour, Hook: sig})
	start(t, d)
	<-published
	// Several failed tries (the first comes back at once).
	for range 3 {
		waitFor(t, sig.finalizes, func(ev outbox.FinalizeEvent) bool { return ev.Err != nil }, "the finalize was not retried")
	}
	b.exec(t, "ALTER TABLE "+away+" RENAME TO outbox")
	eventually(t, func() bool { return b.tryCount("done") == 1 })
	require.Equal(t, 1, rec.Len(), "published once")
	require.Equal(t, int64(1), b.row(t, ids[0]).LeaseVersion, "never re-claimed")
	require.Zero(t, d.Stats().LeaseLost)
}
