package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// A hot aggregate with a deep backlog must not make ordered claims scan its
// backlog: the claim visits one head per aggregate.
func TestClaimOrderedIgnoresBacklogBehindHeads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	q := b.st.QuotedTable()
	_, err := b.pool.Exec(ctx, `INSERT INTO `+q+` (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'hot', 'E', '{}' FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO `+q+` (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'agg-' || g, 'E', '{}' FROM generate_series(1, 50) AS g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "ANALYZE "+q)
	require.NoError(t, err)

	text, plan := explainAnalyze(t, b, b.st.ClaimSQL(true), "'w', 100, 60000000, 12, false, '', true, 1000, '-infinity'")
	rowsRead := 0
	plan.walk(func(n *planNode) {
		if n.RelationName == b.st.Table.Name {
			rowsRead += n.ActualRows * max(n.ActualLoops, 1)
		}
	})
	t.Logf("ordered claim with a 20000-deep hot aggregate (rows read from the table: %d):\n%s", rowsRead, text)
	require.Less(t, rowsRead, 1000, "the ordered claim read the backlog behind the heads")

	rows, _, _, err := b.st.ClaimOrdered(ctx, b.pool, store.ClaimParams{Owner: "w", Batch: 100, Lease: time.Minute, MaxAttempts: 12}, nil)
	require.NoError(t, err)
	require.Len(t, rows, 51, "the hot aggregate's head and the 50 others")
	aggs := map[string]int{}
	for _, r := range rows {
		aggs[r.AggregateID]++
	}
	require.Equal(t, 1, aggs["hot"])
}

// Successive ordered claims sweep the aggregates in turn, and a sweep that
// meets more busy heads than one statement visits still finds the claimable
// head past them.
func TestClaimOrderedSweepsAllAggregates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	q := b.st.QuotedTable()
	// 2500 aggregates whose heads are in flight (unexpired leases), then
	// one claimable aggregate at the end of the key order.
	_, err := b.pool.Exec(ctx, `INSERT INTO `+q+` (aggregate_type, aggregate_id, event_type, payload, status, lease_owner, lease_until, lease_version, attempts)
		SELECT 'order', 'busy-' || lpad(g::text, 5, '0'), 'E', '{}', 'processing', 'other', now() + interval '1 hour', 1, 1
		FROM generate_series(1, 2500) AS g`)
	require.NoError(t, err)
	ids := b.enqueue(t, msg{"zzz-last", "E"})
	rows, _, _, err := b.st.ClaimOrdered(ctx, b.pool, store.ClaimParams{Owner: "w", Batch: 10, Lease: time.Minute, MaxAttempts: 12}, nil)
	require.NoError(t, err)
	require.Len(t, rows, 1, "the claimable head behind 2500 busy ones")
	require.Equal(t, ids[0], rows[0].ID)

	// Fairness: 30 aggregates of 3 messages each, claimed 10 at a time and
	// finalized: each claim continues after the last, so every aggregate is
	// served before any is served twice.
	b2 := setup(t)
	var msgs []msg
	for round := 0; round < 3; round++ {
		for a := 0; a < 30; a++ {
			msgs = append(msgs, msg{fmt.Sprintf("a%02d", a), "E"})
		}
	}
	b2.enqueue(t, msgs...)
	served := map[string]int{}
	var cursor *string
	for claim := 0; claim < 3; claim++ {
		var got []store.Row
		got, _, cursor, err = b2.st.ClaimOrdered(ctx, b2.pool, store.ClaimParams{Owner: "w", Batch: 10, Lease: time.Minute, MaxAttempts: 12, Cursor: cursor}, nil)
		require.NoError(t, err)
		require.Len(t, got, 10)
		var outcomes []store.RowWrite
		for _, r := range got {
			served[r.AggregateID]++
			outcomes = append(outcomes, store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusDone})
		}
		_, err = b2.st.Finalize(ctx, b2.pool, "w", outcomes)
		require.NoError(t, err)
	}
	require.Len(t, served, 30, "three claims of 10 served all 30 aggregates once")
	for agg, n := range served {
		require.Equal(t, 1, n, agg)
	}
}

// explainAnalyze runs q (with args as SQL literals) under EXPLAIN ANALYZE in
// a transaction it rolls back, and returns the plan as text and JSON.
func explainAnalyze(t *testing.T, b *testBundle, q, args string) (string, planNode) {
	t.Helper()
	ctx := t.Context()
	// The connection is held until the prepared statement, which outlives
	// the rollback, is dropped: a pooled transaction's rollback gives its
	// connection back, and a DEALLOCATE after it would run on a connection
	// another test holds.
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	defer conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE analyze_probe") //nolint:errcheck // best effort
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // always rolled back
	_, err = tx.Exec(ctx, "PREPARE analyze_probe AS "+q)
	require.NoError(t, err)
	var js string
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE analyze_probe("+args+")").Scan(&js))
	var doc []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &doc))
	var text strings.Builder
	doc[0].Plan.walk(func(n *planNode) {
		if n.RelationName != "" {
			fmt.Fprintf(&text, "%s on %s using %s: %d rows x %d loops\n", n.NodeType, n.RelationName, n.IndexName, n.ActualRows, n.ActualLoops)
		}
	})
	return text.String(), doc[0].Plan
}

// An aggregate_id of ” (a table migrated before migration 008 may hold
// one) is an aggregate like any other: a sweep that stopped on it resumes
// after it, rather than reading its cursor as "start over" and serving it
// again before the rest.
func TestClaimOrderedEmptyAggregateIDDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, "ALTER TABLE {{table}} DROP CONSTRAINT outbox_nonempty")
	ctx := t.Context()
	b.enqueue(t, msg{"", "E"}, msg{"", "E"}, msg{"", "E"}, msg{"b", "E"})
	var served []string
	var cursor *string
	for range 4 {
		got, _, next, err := b.st.ClaimOrdered(ctx, b.pool, store.ClaimParams{Owner: "w", Batch: 1, Lease: time.Minute, MaxAttempts: 12, Cursor: cursor}, nil)
		require.NoError(t, err)
		require.Len(t, got, 1)
		cursor = next
		served = append(served, got[0].AggregateID)
		b.finalize(t, "w", store.RowWrite{ID: got[0].ID, LeaseVersion: got[0].LeaseVersion, Status: store.StatusDone})
	}
	require.Equal(t, []string{"", "b", "", ""}, served, "the aggregate '' was served again before the others")
}
