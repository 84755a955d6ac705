package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

func TestGauges(t *testing.T) {
	t.Parallel()

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g, err := b.st.Gauges(t.Context(), b.pool)
		require.NoError(t, err)
		require.Equal(t, store.Gauges{}, g)
	})

	t.Run("EveryState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, created_at, attempts, lease_owner, lease_until, done_at)
			VALUES
			('o', 'a', 'E', '{}', 'pending',    now() - interval '40 seconds', 0, NULL, NULL, NULL),
			('o', 'b', 'E', '{}', 'pending',    now(),                         2, NULL, NULL, NULL),
			('o', 'c', 'E', '{}', 'processing', now() - interval '90 seconds', 1, 'w', now() - interval '1 second', NULL),
			('o', 'd', 'E', '{}', 'processing', now(),                         1, 'w', now() + interval '1 minute', NULL),
			('o', 'e', 'E', '{}', 'processing', now(),                         1, 'w', now() - interval '1 minute', NULL),
			('o', 'f', 'E', '{}', 'dead',       now() - interval '1 hour',     12, NULL, NULL, NULL),
			('o', 'g', 'E', '{}', 'done',       now() - interval '2 hours',    1, NULL, NULL, now()),
			('o', 'h', 'E', '{}', 'done',       now() - interval '2 hours',    1, NULL, NULL, now()),
			('o', 'i', 'E', '{}', 'done',       now() - interval '2 hours',    1, NULL, NULL, now())`)
		b.exec(t, "ANALYZE {{table}}")
		g, err := b.st.Gauges(t.Context(), b.pool)
		require.NoError(t, err)
		// The oldest undelivered row is a processing one; a dead or done
		// row, however old, does not count.
		require.GreaterOrEqual(t, g.OldestPendingAge, 90*time.Second)
		require.Less(t, g.OldestPendingAge, 150*time.Second)
		g.OldestPendingAge = 0
		require.Equal(t, store.Gauges{Pending: 2, Processing: 3, Dead: 1, Done: 3, ExpiredLeases: 2}, g)
	})

	t.Run("NeverAnalysed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Too few rows for autovacuum to analyse the table meanwhile: the
		// planner has no row count, so done is counted (it read 0 as an
		// estimate beside status's exact figure).
		b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, done_at)
			SELECT 'o', 'a' || g, 'E', '{}', CASE WHEN g <= 3 THEN 'pending' ELSE 'done' END, now()
			FROM generate_series(1, 10) AS g`)
		var reltuples float64
		require.NoError(t, b.pool.QueryRow(t.Context(),
			"SELECT reltuples FROM pg_class WHERE oid = $1::text::regclass", b.st.QuotedTable()).Scan(&reltuples))
		require.Equal(t, -1.0, reltuples)
		g, err := b.st.Gauges(t.Context(), b.pool)
		require.NoError(t, err)
		require.Equal(t, int64(3), g.Pending)
		require.Equal(t, int64(7), g.Done)
		require.False(t, g.DoneEstimated)
	})

	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st, err := store.New(b.st.Table.Schema + ".missing")
		require.NoError(t, err)
		_, err = st.Gauges(t.Context(), b.pool)
		require.ErrorIs(t, err, store.ErrTableMissing)
	})
}

// TestGaugesAtScale checks the figures and the plan on a table where done
// rows dominate, as they do in production: the statement reads the partial
// indexes only, never the table sequentially, so polling it stays cheap
// however many done rows accumulate.
func TestGaugesAtScale(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	const done = 300_000
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, created_at, attempts, done_at)
		SELECT 'order', 'order-' || (g % 20000), 'OrderPlaced', '{}'::jsonb, 'done', now() - interval '2 hours', 1, now() - interval '1 hour'
		FROM generate_series(1, 300000) AS g`)
	// 200 pending (the oldest 5 minutes old), 50 processing of which 7 have
	// expired leases, 30 dead.
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT 'order', 'order-' || g, 'OrderPaid', '{}'::jsonb,
		       CASE WHEN g = 1 THEN now() - interval '5 minutes' ELSE now() END
		FROM generate_series(1, 200) AS g`)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, lease_owner, lease_until, lease_version)
		SELECT 'order', 'order-' || g, 'OrderPaid', '{}'::jsonb, 'processing', 1, 'w',
		       CASE WHEN g <= 7 THEN now() - interval '1 second' ELSE now() + interval '1 minute' END, 1
		FROM generate_series(1, 50) AS g`)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, last_error)
		SELECT 'order', 'order-' || g, 'OrderPaid', '{}'::jsonb, 'dead', 12, 'boom'
		FROM generate_series(1, 30) AS g`)
	b.exec(t, "ANALYZE {{table}}")

	g, err := b.st.Gauges(ctx, b.pool)
	require.NoError(t, err)
	t.Logf("gauges: %+v", g)
	require.Equal(t, int64(200), g.Pending)
	require.Equal(t, int64(50), g.Processing)
	require.Equal(t, int64(30), g.Dead)
	require.Equal(t, int64(7), g.ExpiredLeases)
	// ANALYZE reads every page of a table this size, so its row count is
	// exact unless autovacuum sampled it differently meanwhile.
	require.InDelta(t, done, g.Done, done*0.01)
	require.GreaterOrEqual(t, g.OldestPendingAge, 5*time.Minute)
	require.Less(t, g.OldestPendingAge, 6*time.Minute)

	name := b.st.Table.Name
	arg := "'" + b.st.QuotedTable() + "'" // schema names are hex: no quote to escape
	for _, generic := range []bool{false, true} {
		text, plan := explain(t, b.pool, b.st.GaugesSQL(), generic, arg)
		t.Logf("Gauges plan (generic %t), %d done and 280 other rows:\n%s", generic, done, text)
		// Dead rows are counted through the dead index, or the aggregate
		// index (its predicate, status <> 'done', holds them too).
		requireIndexDriven(t, b.st, plan, []string{name + "_ready", name + "_leased"},
			[]string{name + "_dead", name + "_aggregate_head"})
		seq := 0
		plan.walk(func(n *planNode) {
			if n.NodeType == "Seq Scan" && n.RelationName == name {
				seq++
			}
		})
		require.Zero(t, seq, "sequential scan of %s", name)
	}
}
