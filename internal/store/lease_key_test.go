package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// One owner may hold a stale lease and the lease that replaced it on the
// same row (it claimed the row again); Finalize and Heartbeat must say
// which of the two held, not just which row.
func TestFinalizeAndHeartbeatReportPerLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 1)
	p := store.ClaimParams{Owner: "w", Batch: 1, Lease: time.Minute, MaxAttempts: 5}
	require.Len(t, b.claim(t, p), 1)
	b.exec(t, "UPDATE {{table}} SET status = 'pending' WHERE id = $1", ids[0])
	again := b.claim(t, p)
	require.Len(t, again, 1)
	require.Equal(t, int64(2), again[0].LeaseVersion)

	stale, current := store.Lease{ID: ids[0], Version: 1}, store.Lease{ID: ids[0], Version: 2}
	extended, err := b.st.Heartbeat(t.Context(), b.pool, "w", []store.Lease{stale, current}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, map[store.Lease]bool{current: true}, extended)

	held := b.finalize(t, "w",
		store.RowWrite{ID: ids[0], LeaseVersion: 1, Status: store.StatusPending, Refund: true},
		store.RowWrite{ID: ids[0], LeaseVersion: 2, Status: store.StatusDone},
	)
	require.Equal(t, []bool{false, true}, held)
}
