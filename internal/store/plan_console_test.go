package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
			})
		}
	}
}
