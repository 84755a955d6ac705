package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/store"
	"github.com/outboxd/outbox/internal/testdb"
)

// BenchmarkDeliveryPath compares the database work per message of the two
// lease designs, without a sink: row leases (one claim statement and one
// finalize per batch of 100) and shard leases (one read of the held
// shards' pending rows and one fenced finalize per batch). It reports the
// drain rate one loop reaches and the WAL written per message.
func BenchmarkDeliveryPath(b *testing.B) {
	for _, mode := range []string{"Rows", "Shards"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			pool := testdb.Pool(b)
			table := testdb.NewSchema(b) + ".outbox"
			a, err := outbox.NewAdmin(pool, table)
			require.NoError(b, err)
			require.NoError(b, a.Migrate(ctx))
			st, err := store.New(table)
			require.NoError(b, err)
			const batch, shards = 100, 16
			if mode == "Shards" {
				require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnableShards(ctx, tx, shards) }))
			}
			_, err = pool.Exec(ctx, `INSERT INTO `+st.QuotedTable()+` (aggregate_type, aggregate_id, event_type, payload)
				SELECT 'order', g::text, 'OrderCreated', '{"n":1}' FROM generate_series(1, $1) AS g`, b.N*batch)
			require.NoError(b, err)
			_, err = pool.Exec(ctx, "VACUUM ANALYZE "+st.QuotedTable())
			require.NoError(b, err)
			// Four loops, as four dispatchers would run: row leases claim
			// from one table, shard leases take a quarter of the shards each.
			const loops = 4
			steps := make([]deliveryStep, loops)
			for i := range steps {
				steps[i] = rowStep(st, batch)
				if mode == "Shards" {
					steps[i] = shardStep(b, st, pool, fmt.Sprint("bench-", i), shards/loops, batch/(shards/loops))
				}
			}
			wal0 := walLSN(b, pool)
			b.ResetTimer()
			start := time.Now()
			var n, left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			for _, step := range steps {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						got, err := step(ctx, pool)
						if err != nil {
							b.Error(err)
							return
						}
						n.Add(int64(got))
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			var wal float64
			require.NoError(b, pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", wal0).Scan(&wal))
			b.ReportMetric(float64(n.Load())/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(wal/float64(max(n.Load(), 1)), "WAL-B/msg")
		})
	}
}

func walLSN(b *testing.B, pool *pgxpool.Pool) string {
	var lsn string
	require.NoError(b, pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
	return lsn
}

type deliveryStep func(context.Context, *pgxpool.Pool) (int, error)

func rowStep(st *store.Store, batch int) deliveryStep {
	owner := "bench"
	var rows []store.Row
	outcomes := make([]store.RowWrite, 0, batch)
	return func(ctx context.Context, pool *pgxpool.Pool) (int, error) {
		var err error
		rows, _, err = st.Claim(ctx, pool, store.ClaimParams{Owner: owner, Batch: batch, Lease: time.Minute, MaxAttempts: 10}, rows)
		if err != nil {
			return 0, err
		}
		outcomes = outcomes[:0]
		for _, r := range rows {
			outcomes = append(outcomes, store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusDone})
		}
		_, err = st.Finalize(ctx, pool, owner, outcomes)
		return len(rows), err
	}
}

func shardStep(b *testing.B, st *store.Store, pool *pgxpool.Pool, owner string, take, perShard int) deliveryStep {
	held, err := st.AcquireShards(context.Background(), pool, owner, time.Hour, take, 100)
	require.NoError(b, err)
	return func(ctx context.Context, pool *pgxpool.Pool) (int, error) {
		leases := make([]store.ShardLease, len(held))
		for i := range held {
			leases[i] = held[i].ShardLease
		}
		rows, _, err := st.ReadShards(ctx, pool, store.ShardReadParams{Owner: owner, Reads: store.ReadsFromFront(leases, perShard), Ordered: true})
		if err != nil {
			return 0, err
		}
		_, err = st.FinalizeShards(ctx, pool, owner, doneWrites(held, rows))
		return len(rows), err
	}
}
