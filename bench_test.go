package outbox_test

import (
	"context"
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
