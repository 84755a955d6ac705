package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRunRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 5, "a")
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'done', done_at = now() - interval '10 days' WHERE id = ANY($1)", ids[:3])
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'done', done_at = now() WHERE id = $1", ids[3])
	ctx, cancel := context.WithCancel(t.Context())
	// Two purgers at once, as two replicas would run them: one as a
	// service, one as a blocking loop.
	r := b.admin.Retention(7*24*time.Hour, 20*time.Millisecond, quietLogger())
	require.NoError(t, r.Stop(), "Stop before Start")
	require.NoError(t, r.Start(ctx))
	require.ErrorContains(t, r.Start(ctx), "already started")
	var wg sync.WaitGroup
	wg.Go(func() { b.admin.RunRetention(ctx, 7*24*time.Hour, 20*time.Millisecond, quietLogger()) })
	eventually(t, func() bool { return b.tryCount("done") == 1 })
	// Rows that turn old later are purged on a later pass.
	b.exec(t, "UPDATE "+b.quoted+" SET done_at = now() - interval '8 days' WHERE id = $1", ids[3])
	eventually(t, func() bool { return b.tryCount("done") == 0 })
	require.NoError(t, r.Stop())
	require.NoError(t, r.Stop(), "a second Stop")
	cancel()
	wg.Wait()
	require.Equal(t, 1, b.countStatus(t, "pending"), "retention touches only done rows")
}
