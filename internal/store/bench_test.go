package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/store"
	"github.com/outboxd/outbox/internal/testdb"
)

// BenchmarkClaimFinalize measures the hot path without a sink: one claim
// statement and one finalize statement per batch of 100 rows. ns/op is per
// batch; msgs/s is the drain rate one claimer reaches.
func BenchmarkClaimFinalize(b *testing.B) {
	for _, ordered := range []bool{false, true} {
		name := "Unordered"
		if ordered {
			name = "Ordered"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			pool := testdb.Pool(b)
			table := testdb.NewSchema(b) + ".outbox"
			a, err := outbox.NewAdmin(pool, table)
			require.NoError(b, err)
			require.NoError(b, a.Migrate(ctx))
			st, err := store.New(table)
			require.NoError(b, err)
			const batch = 100
			_, err = pool.Exec(ctx, `INSERT INTO `+st.QuotedTable()+` (aggregate_type, aggregate_id, event_type, payload)
				SELECT 'order', g::text, 'OrderCreated', '{"n":1}' FROM generate_series(1, $1) AS g`, b.N*batch)
			require.NoError(b, err)
			_, err = pool.Exec(ctx, "ANALYZE "+st.QuotedTable())
			require.NoError(b, err)
			outcomes := make([]store.RowWrite, 0, batch)
			var rows []store.Row
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				rows, _, err = st.Claim(ctx, pool, store.ClaimParams{Owner: "bench", Batch: batch, Lease: time.Minute, MaxAttempts: 10, Ordered: ordered}, rows)
				if err != nil {
					b.Fatal(err)
				}
				outcomes = outcomes[:0]
				for _, r := range rows {
					outcomes = append(outcomes, store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusDone})
				}
				if _, err := st.Finalize(ctx, pool, "bench", outcomes); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
