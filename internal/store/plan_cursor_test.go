package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// TestCursorPlans checks the generic plans of the snapshot-cursor
// statements on the outbox and parked tables: the load reads the cursor
// index only (a range, and one probe per transaction in progress in done;
// flattened into a join, the probes were a hash join over a walk of the
// primary key), never the table or its primary key in order; the fetch
// probes the primary key per id; the parked read scans neither table. (The
// shard table is a few pages, read whole; docs/snapshot-cursors.md says
// what that costs under a held snapshot.)
func TestCursorPlans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enableCursor(t, 16)
	for range 20 {
		b.enqueueN(t, 100)
	}
	b.exec(t, "ANALYZE {{table}}")
	b.exec(t, "ANALYZE "+b.st.Table.String()+"_shards")
	load, fetch, parked, _ := b.st.CursorSQL()
	page, dead, breakdown := b.st.CursorConsoleSQL()
	deadRetry, _, err := b.st.CursorBulkSQL(store.ActionDeadRetry, store.BatchParams{Filter: store.Filter{AggregateType: "order"}, Size: 500})
	require.NoError(t, err)
	name := b.st.Table.Name
	noSeqScan := func(t *testing.T, plan planNode) {
		plan.walk(func(n *planNode) {
			if n.RelationName == name {
				require.NotEqual(t, "Seq Scan", n.NodeType)
			}
		})
	}
	for _, tc := range []struct {
		name, sql, args string
		check           func(t *testing.T, plan planNode)
	}{
		{"Load", load, `'d1', '{0,1}', '{1,1}', '{"10:20:12,15",NULL}', '{NULL,NULL}', '{0,0}', 1000, '{"` + b.origin(t) + `",""}'`, func(t *testing.T, plan planNode) {
			used := map[string]bool{}
			plan.walk(func(n *planNode) {
				if n.RelationName == name {
					require.NotEqual(t, "Seq Scan", n.NodeType)
				}
				if (n.RelationName == name || n.NodeType == "Bitmap Index Scan") && n.IndexName != "" {
					used[n.IndexName] = true
				}
			})
			require.Equal(t, map[string]bool{name + "_cursor": true}, used, "the cursor index only")
		}},
		{"Fetch", fetch, `'{1,2,3}', true`, func(t *testing.T, plan planNode) {
			plan.walk(func(n *planNode) {
				if n.RelationName == name {
					require.Equal(t, name+"_pkey", n.IndexName, "%s", n.NodeType)
					require.Regexp(t, pointLookup, n.IndexCond)
				}
			})
		}},
		{"Parked", parked, `'d1', '{0,1}', '{1,1}', 10, '{}', true`, func(t *testing.T, plan planNode) {
			plan.walk(func(n *planNode) {
				if n.RelationName == name || n.RelationName == name+"_parked" {
					require.NotEqual(t, "Seq Scan", n.NodeType, "%s", n.RelationName)
				}
			})
		}},
		// The console: a page walks the primary key, the dead ones are
		// looked up by id, the breakdown reads the rows past the cursors
		// through the cursor index; none reads the table whole.
		{"ConsolePage", page, `50`, noSeqScan},
		{"ConsoleDead", dead, `50`, func(t *testing.T, plan planNode) {
			noSeqScan(t, plan)
			plan.walk(func(n *planNode) {
				if n.RelationName == name {
					require.Equal(t, name+"_pkey", n.IndexName, "%s", n.NodeType)
				}
			})
		}},
		{"ConsoleBreakdown", breakdown, `10`, noSeqScan},
		// A bulk batch looks the dead up by id too.
		{"BulkDeadRetry", deadRetry, `500, 1, 'c', 'order'`, func(t *testing.T, plan planNode) {
			noSeqScan(t, plan)
			plan.walk(func(n *planNode) {
				if n.RelationName == name {
					require.Equal(t, name+"_pkey", n.IndexName, "%s", n.NodeType)
				}
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, plan := explain(t, b.pool, tc.sql, true, tc.args)
			t.Log("\n" + text)
			tc.check(t, plan)
		})
	}
}
