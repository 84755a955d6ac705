package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// BenchmarkDrain drains b.N pre-inserted messages through a sink that
// accepts everything: the dispatcher's own cost (claim, hand-off, batched
// finalize) with the database on the same machine. Reported as msgs/s.
func BenchmarkDrain(b *testing.B) {
	for _, tc := range []struct {
		name    string
		ordered bool
		shards  bool
		cursor  bool
	}{{"Unordered", false, false, false}, {"Ordered", true, false, false}, {"Shards", true, true, false}, {"ShardsUnordered", false, true, false},
		{"Cursor", false, true, true}, {"CursorOrdered", true, true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			bundle := setup(b)
			mode := outbox.LeaseRows
			if tc.shards {
				require.NoError(b, bundle.admin.EnableShards(context.Background(), 16))
				mode = outbox.LeaseShards
			}
			if tc.cursor {
				require.NoError(b, bundle.admin.EnableCursors(context.Background()))
				mode = outbox.LeaseCursor
			}
			_, err := bundle.pool.Exec(context.Background(), `INSERT INTO `+bundle.quoted+` (aggregate_type, aggregate_id, event_type, payload)
				SELECT 'order', (g % 1000)::text, 'OrderCreated', '{"n":1}' FROM generate_series(1, $1) AS g`, b.N)
			require.NoError(b, err)
			_, err = bundle.pool.Exec(context.Background(), "VACUUM ANALYZE "+bundle.quoted)
			require.NoError(b, err)
			sink := outbox.SinkFunc(func(context.Context, *outbox.Message) error { return nil })
			d, err := outbox.NewDispatcher(bundle.pool, sink, &outbox.Config{
				Table: bundle.table, Logger: quietLogger(), Ordered: tc.ordered, PollInterval: 10 * time.Millisecond, LeaseMode: mode,
			})
			require.NoError(b, err)
			b.ResetTimer()
			start := time.Now()
			require.NoError(b, d.Drain(context.Background()))
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			st := d.Stats()
			b.ReportMetric(float64(st.Claims+st.Finalizes)/float64(b.N), "roundtrips/msg")
		})
	}
}

// BenchmarkAttemptHistory measures what the attempt history costs: b.N
// messages, each failing its first delivery and delivered at its second
// (Failing), or delivered at once (Delivered), with the history kept or
// off. Reported as msgs/s and WAL bytes per message (the whole server's
// WAL while the drain runs; the producers' inserts are outside it).
func BenchmarkAttemptHistory(b *testing.B) {
	for _, tc := range []struct {
		name    string
		fail    bool
		history int
	}{
		{"Delivered/History", false, 0}, {"Delivered/Off", false, outbox.NoAttemptHistory},
		{"Failing/History", true, 0}, {"Failing/Off", true, outbox.NoAttemptHistory},
	} {
		b.Run(tc.name, func(b *testing.B) {
			bundle := setup(b)
			ctx := context.Background()
			_, err := bundle.pool.Exec(ctx, `INSERT INTO `+bundle.quoted+` (aggregate_type, aggregate_id, event_type, payload)
				SELECT 'order', (g % 1000)::text, 'OrderCreated', '{"n":1}' FROM generate_series(1, $1) AS g`, b.N)
			require.NoError(b, err)
			_, err = bundle.pool.Exec(ctx, "VACUUM ANALYZE "+bundle.quoted)
			require.NoError(b, err)
			sink := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
				if tc.fail && m.Attempt == 1 {
					return outbox.WithResponseStatus(outbox.Retryable(errors.New("httpsink: POST https://hooks.example.com: HTTP 503 Service Unavailable")), 503)
				}
				return nil
			})
			d, err := outbox.NewDispatcher(bundle.pool, sink, &outbox.Config{
				Table: bundle.table, Logger: quietLogger(), PollInterval: 10 * time.Millisecond,
				RetryBase: time.Millisecond, RetryCap: time.Millisecond, AttemptHistory: tc.history,
			})
			require.NoError(b, err)
			var lsn0, lsn1 string
			require.NoError(b, bundle.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn0))
			b.ResetTimer()
			start := time.Now()
			require.NoError(b, d.Drain(ctx))
			elapsed := time.Since(start)
			b.StopTimer()
			var wal float64
			require.NoError(b, bundle.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn1))
			require.NoError(b, bundle.pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)", lsn1, lsn0).Scan(&wal))
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(wal/float64(b.N), "WAL-B/msg")
		})
	}
}
