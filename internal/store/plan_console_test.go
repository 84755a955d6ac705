package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// literals renders args as the SQL literals EXECUTE takes.
func literals(args []any) string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			out[i] = "NULL"
		case int, int64, bool:
			out[i] = fmt.Sprint(v)
		case string:
			out[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case time.Time:
			out[i] = "'" + v.UTC().Format(time.RFC3339Nano) + "'"
		case []int64:
			out[i] = "'{" + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(v)), ","), "[]") + "}'"
		default:
			panic(fmt.Sprintf("no literal for %T", a))
		}
	}
	return strings.Join(out, ", ")
}

// requireNoSeqScan fails when plan reads the outbox table sequentially, or
// does not use every index in want.
func requireNoSeqScan(t *testing.T, st *store.Store, plan planNode, want []string) {
	t.Helper()
	name := st.Table.Name
	used := map[string]bool{}
	plan.walk(func(n *planNode) {
		if n.RelationName == name {
			require.NotEqual(t, "Seq Scan", n.NodeType, "sequential scan of %s (alias %s)", name, n.Alias)
		}
		if n.IndexName != "" {
			used[n.IndexName] = true
		}
	})
	for _, idx := range want {
		require.True(t, used[idx], "plan does not use %s; used %s", idx, strings.Join(keys(used), ", "))
	}
}

// TestConsolePlans proves the console's hot statements stay index-driven
// when done rows dominate the table: status views, id ranges, newest first,
// the dead list by filter, capped counts, the bulk batches and the overview.
func TestConsolePlans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, done_at)
		SELECT 'order', 'order-' || (g % 20000), 'OrderPlaced', jsonb_build_object('n', g), 'done', 1, now()
		FROM generate_series(1, 200000) AS g`)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, last_error,
			lease_owner, lease_until)
		SELECT 'order', 'order-' || (g % 500), CASE WHEN g % 2 = 0 THEN 'OrderPaid' ELSE 'OrderShipped' END, '{}',
			(ARRAY['pending', 'processing', 'dead'])[g % 3 + 1], 1, 'timeout',
			CASE WHEN g % 3 = 1 THEN 'w' END, CASE WHEN g % 3 = 1 THEN now() END
		FROM generate_series(1, 3000) AS g`)
	b.exec(t, "ANALYZE {{table}}")

	name := b.st.Table.Name
	dead := name + "_dead"
	f := func(status ...string) store.Filter { return store.Filter{Status: status} }
	type tc struct {
		name string
		sql  string
		args []any
		want []string
	}
	var cases []tc
	page := func(n string, flt store.Filter, p store.Page, want ...string) {
		q, args, err := b.st.MessagesSQL(flt, p)
		require.NoError(t, err)
		cases = append(cases, tc{"Messages" + n, q, args, want})
	}
	count := func(n string, flt store.Filter, want ...string) {
		q, args, err := b.st.CountSQL(flt, 10001)
		require.NoError(t, err)
		cases = append(cases, tc{"Count" + n, q, args, want})
	}
	// A filter with a term no index serves: the bounded window (100,000
	// rows in the library; 50,000 here, a quarter of the done rows).
	search := func(n string, flt store.Filter, p store.Page, want ...string) {
		q, args, err := b.st.SearchSQL(flt, p, 50000, nil)
		require.NoError(t, err)
		cases = append(cases, tc{"Search" + n, q, args, want})
	}
	countWindow := func(n string, flt store.Filter, want ...string) {
		q, args, err := b.st.CountWindowSQL(flt, 50000, nil)
		require.NoError(t, err)
		cases = append(cases, tc{"CountWindow" + n, q, args, want})
	}
	bulk := func(n string, a store.Action, flt store.Filter, want ...string) {
		q, args, err := b.st.BulkSQL(a, store.BatchParams{Filter: flt, After: 1000, Size: 500, AuditID: 1, Channel: "c", Name: "r"})
		require.NoError(t, err)
		cases = append(cases, tc{"Bulk" + n, q, args, want})
	}
	newest := store.Page{Limit: 51, Desc: true}
	page("NewestFirst", store.Filter{}, newest, name+"_pkey")
	page("NewestFirstNextPage", store.Filter{}, store.Page{After: 150000, Limit: 51, Desc: true}, name+"_pkey")
	page("OldestFirst", store.Filter{}, store.Page{Limit: 51}, name+"_pkey")
	page("Done", f("done"), newest, name+"_pkey")
	page("Dead", f("dead"), newest, dead)
	page("DeadNextPage", f("dead"), store.Page{After: 201500, Limit: 51, Desc: true}, dead)
	page("DeadByEventType", store.Filter{Status: []string{"dead"}, EventType: "OrderPaid", ErrorContains: "time"}, newest, dead)
	// Pending rows are the newest: the planner may walk the primary key
	// backwards to them or read the ready index and sort; either is bounded.
	page("Pending", f("pending"), newest)
	page("Processing", f("processing"), newest, name+"_leased")
	page("Undelivered", f("pending", "processing"), newest)
	page("IDRange", store.Filter{IDMin: 100000, IDMax: 100100}, newest, name+"_pkey")
	page("IDs", store.Filter{IDs: []int64{5, 70000, 200001}}, newest, name+"_pkey")
	count("All", store.Filter{}, name+"_pkey")
	count("Done", f("done"), name+"_pkey")
	count("Dead", f("dead"), dead)
	count("DeadByEventType", store.Filter{Status: []string{"dead"}, EventType: "OrderPaid"}, dead)
	count("Pending", f("pending"))
	count("IDRange", store.Filter{IDMin: 100000, IDMax: 120000}, name+"_pkey")
	rare := store.Filter{AggregateID: "order-7", ErrorContains: "disk"}
	day := store.Filter{CreatedAfter: time.Now().Add(-time.Hour), CreatedBefore: time.Now()}
	search("ErrorText", rare, newest, name+"_pkey")
	search("ErrorTextContinued", rare, store.Page{After: 120000, Limit: 51, Desc: true}, name+"_pkey")
	search("ErrorTextOldestFirst", rare, store.Page{Limit: 51}, name+"_pkey")
	search("CreatedAt", day, newest, name+"_pkey")
	search("PayloadPath", store.Filter{PayloadPath: "$.n > 199990"}, newest, name+"_pkey")
	search("DoneErrorText", store.Filter{Status: []string{"done"}, ErrorContains: "x"}, newest, name+"_pkey")
	search("DeadErrorText", store.Filter{Status: []string{"dead"}, ErrorContains: "x"}, newest, dead)
	search("IDRangeCreatedAt", store.Filter{IDMin: 1000, IDMax: 90000, CreatedAfter: time.Now()}, newest, name+"_pkey")
	countWindow("ErrorText", rare, name+"_pkey")
	countWindow("PayloadPath", store.Filter{PayloadPath: "$.n > 199990"}, name+"_pkey")
	countWindow("DeadErrorText", store.Filter{Status: []string{"dead"}, ErrorContains: "x"}, dead)
	bulk("DeadRetry", store.ActionDeadRetry, store.Filter{EventType: "OrderPaid"}, dead)
	bulk("DeadSkip", store.ActionDeadSkip, store.Filter{}, dead)
	bulk("Replay", store.ActionReplay, store.Filter{IDMax: 5000}, name+"_pkey")
	cases = append(cases,
		tc{"Breakdown", b.st.BreakdownSQL(), []any{20}, []string{name + "_aggregate_head"}},
		tc{"Dispatchers", b.st.OwnersSQL(), nil, []string{name + "_leased"}},
		// The dead index must not draw the ordered probe away from the
		// aggregate index once dead rows exist.
		tc{"UndeliveredOrdered", b.st.UndeliveredSQL(), []any{true}, []string{name + "_aggregate_head"}},
	)

	for _, c := range cases {
		for _, generic := range []bool{false, true} {
			mode := "Custom"
			if generic {
				mode = "Generic"
			}
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				text, plan := explain(t, b.pool, c.sql, generic, literals(c.args))
				t.Logf("%s plan (%s), 200000 done, 1000 each pending, processing and dead:\n%s", c.name, mode, text)
				requireNoSeqScan(t, b.st, plan, c.want)
				if strings.HasPrefix(c.name, "Search") {
					// The window function and the ORDER BYs take the walk's order.
					plan.walk(func(n *planNode) { require.NotEqual(t, "Sort", n.NodeType, "a search sorts its window") })
				}
			})
		}
	}
}

// TestStatusPlan runs status.sql under EXPLAIN ANALYZE on a table above the
// done estimate's threshold (analysed, over 10,000 rows): the capped count
// of done rows is a sequential scan in the plan, but one that must never
// run there. Every other part reads the partial index of its status.
func TestStatusPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, done_at)
		SELECT 'order', 'order-' || g, 'OrderPlaced', '{}', 'done', 1, now() FROM generate_series(1, 30000) AS g`)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status)
		SELECT 'order', 'order-' || g, 'OrderPaid', '{}', CASE WHEN g % 20 = 0 THEN 'pending' ELSE 'dead' END
		FROM generate_series(1, 2000) AS g`)
	b.exec(t, "ANALYZE {{table}}")
	name := b.st.Table.Name
	for _, generic := range []bool{false, true} {
		text, plan := explainAnalyzeMode(t, b, b.st.StatusSQL(), generic, literals([]any{b.st.Table.Quoted()}))
		t.Logf("status plan (generic %v), 30000 done, 100 pending, 1900 dead:\n%s", generic, text)
		ran := 0
		plan.walk(func(n *planNode) {
			// Its rows include the dead ones: a heap page per dead row.
			require.NotEqual(t, name+"_aggregate_head", n.IndexName, "status reads the dead rows")
			if n.RelationName == name && n.NodeType == "Seq Scan" {
				require.Zero(t, n.ActualLoops, "the done count ran: a sequential scan of %s", name)
				ran++
			}
		})
		require.NotZero(t, ran, "the plan holds the capped done count (never executed)")
	}
}

// explainAnalyzeMode is explain, executing the statement: the plan as
// EXPLAIN ANALYZE prints it, and as JSON.
func explainAnalyzeMode(t *testing.T, b *testBundle, q string, generic bool, args string) (string, planNode) {
	t.Helper()
	ctx := t.Context()
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	mode := map[bool]string{false: "force_custom_plan", true: "force_generic_plan"}[generic]
	_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode+"; PREPARE plan_probe AS "+q)
	require.NoError(t, err)
	defer func() {
		_, err := conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE plan_probe; RESET plan_cache_mode")
		require.NoError(t, err)
	}()
	execute := "EXECUTE plan_probe(" + args + ")"
	rows, err := conn.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "+execute)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var js string
	require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+execute).Scan(&js))
	var doc []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &doc))
	require.Len(t, doc, 1)
	return strings.Join(lines, "\n"), doc[0].Plan
}

// TestSearchPlanIndexedColumn: with the operator's index on (aggregate_id,
// id), IndexedColumns finds it and an aggregate_id term drives the search
// through it, alone (the plain listing) or with a term checked in a window.
func TestSearchPlanIndexedColumn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, done_at)
		SELECT 'order', 'order-' || (g % 20000), 'OrderPlaced', '{}', 'done', 1, now() FROM generate_series(1, 100000) AS g`)
	b.exec(t, `CREATE INDEX outbox_aggregate_all ON {{table}} (aggregate_id, id)`)
	b.exec(t, `CREATE INDEX outbox_event ON {{table}} (event_type)`) // not (column, id): no help for id order
	b.exec(t, "ANALYZE {{table}}")
	indexed, err := b.st.IndexedColumns(t.Context(), b.pool)
	require.NoError(t, err)
	require.Equal(t, []string{"aggregate_id"}, indexed)
	require.False(t, store.Residual(store.Filter{AggregateID: "order-7"}, indexed))
	require.True(t, store.Residual(store.Filter{EventType: "OrderPlaced"}, indexed))

	newest := store.Page{Limit: 51, Desc: true}
	list, listArgs, err := b.st.MessagesSQL(store.Filter{AggregateID: "order-7"}, newest)
	require.NoError(t, err)
	search, searchArgs, err := b.st.SearchSQL(store.Filter{AggregateID: "order-7", ErrorContains: "x"}, newest, 5000, indexed)
	require.NoError(t, err)
	for name, c := range map[string]struct {
		sql  string
		args []any
	}{"Messages": {list, listArgs}, "Search": {search, searchArgs}} {
		for _, generic := range []bool{false, true} {
			text, plan := explain(t, b.pool, c.sql, generic, literals(c.args))
			t.Logf("%s plan (generic %v):\n%s", name, generic, text)
			requireNoSeqScan(t, b.st, plan, []string{"outbox_aggregate_all"})
		}
	}
}
