package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// TestClaimDecodesHeaders: a claimed row carries its headers decoded, a
// hand-written object with other values as their JSON text, and a column
// that is not an object as BadHeaders with no headers.
func TestClaimDecodesHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := "INSERT INTO " + b.st.QuotedTable() + ` (aggregate_type, aggregate_id, event_type, payload, headers) VALUES
		('a', '1', 'E', '1', '{"traceparent": "tp"}'),
		('a', '2', 'E', '2', NULL),
		('a', '3', 'E', '3', '{"n": 5, "s": "x"}'),
		('a', '4', 'E', '4', '[1, 2]')`
	_, err := b.pool.Exec(t.Context(), q)
	require.NoError(t, err)
	rows, _, err := b.st.Claim(t.Context(), b.pool, store.ClaimParams{Owner: "w", Batch: 10, Lease: 30e9, MaxAttempts: 5}, nil)
	require.NoError(t, err)
	require.Len(t, rows, 4)
	require.Equal(t, map[string]string{"traceparent": "tp"}, rows[0].Headers)
	require.Nil(t, rows[1].Headers)
	require.Equal(t, map[string]string{"n": "5", "s": "x"}, rows[2].Headers)
	require.Nil(t, rows[3].Headers)
	require.True(t, rows[3].BadHeaders)
	require.False(t, rows[0].BadHeaders || rows[1].BadHeaders || rows[2].BadHeaders)
}
