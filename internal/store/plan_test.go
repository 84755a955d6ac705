package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// planNode is the part of EXPLAIN (FORMAT JSON) output the assertions read.
type planNode struct {
	NodeType     string `json:"Node Type"`
	RelationName string `json:"Relation Name"`
	Schema       string `json:"Schema"`
	Alias        string `json:"Alias"`
	IndexName    string `json:"Index Name"`
	IndexCond    string `json:"Index Cond"`
	ActualRows   int    `json:"Actual Rows"`
	ActualLoops  int    `json:"Actual Loops"`
	// RemovedByFilter are the rows a scan read and its filter dropped.
	RemovedByFilter int        `json:"Rows Removed by Filter"`
	Plans           []planNode `json:"Plans"`
}

// walk calls fn on n and every node below it.
func (n *planNode) walk(fn func(*planNode)) {
	fn(n)
	for i := range n.Plans {
		n.Plans[i].walk(fn)
	}
}

// explain returns the plan of q, run as a prepared statement executed with
// args (SQL literals), as text for the log and as parsed JSON for the
// assertions. generic forces the plan a prepared statement may switch to
// after its first executions, which cannot see the parameter values.
func explain(t *testing.T, pool *pgxpool.Pool, q string, generic bool, args string) (string, planNode) {
	t.Helper()
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	mode := "force_custom_plan"
	if generic {
		mode = "force_generic_plan"
	}
	// Session state on a pooled connection: undone before it goes back.
	_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "PREPARE plan_probe AS "+q)
	require.NoError(t, err)
	defer func() {
		_, err := conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE plan_probe; RESET plan_cache_mode")
		require.NoError(t, err)
	}()

	execute := "EXECUTE plan_probe(" + args + ")"
	if args == "" {
		execute = "EXECUTE plan_probe" // a statement without parameters
	}
	rows, err := conn.Query(ctx, "EXPLAIN (COSTS OFF) "+execute)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)

	var js string
	require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON, VERBOSE) "+execute).Scan(&js))
	var doc []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &doc))
	require.Len(t, doc, 1)
	return strings.Join(lines, "\n"), doc[0].Plan
}

// TestPlansUsePartialIndexes proves the hot statements stay index-driven
// when done rows dominate the table: no sequential scan of the outbox and
// no walk of its primary key, only the partial indexes that hold
// undelivered rows (and primary-key probes for ids already chosen).
func TestPlansUsePartialIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, done_at)
		SELECT 'order', 'order-' || (g % 20000), 'OrderPlaced', '{}'::jsonb, 'done', 1, now() - interval '1 hour'
		FROM generate_series(1, 200000) AS g`)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'order-' || (g % 500), 'OrderPaid', '{}'::jsonb
		FROM generate_series(1, 1000) AS g`)
	b.exec(t, "ANALYZE {{table}}")
	st, err := b.st.Status(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 1000, "processing": 0, "done": 200000, "dead": 0}, st.Counts)

	name := b.st.Table.Name
	for _, tc := range []struct {
		name  string
		sql   string
		args  string
		want  []string // every one used
		anyOf []string // at least one used
		cond  string   // an index condition of the plan matches it
		not   string   // an index not used
	}{
		{
			name: "Claim",
			sql:  b.st.ClaimSQL(false),
			// owner, batch, lease (30 s in µs), max attempts, clear wait,
			// the position to start after (the front), expired since.
			args: "'planner', 50, 30000000, 12, false, '-infinity', 0, '-infinity'",
			want: []string{name + "_ready", name + "_leased"},
		},
		{
			name: "ClaimAfterAPosition",
			sql:  b.st.ClaimSQL(false),
			args: "'planner', 50, 30000000, 12, false, now() - interval '1 minute', 200500, now() - interval '1 second'",
			want: []string{name + "_ready", name + "_leased"},
			// the ready index is entered at the position
			cond: `\(ROW\(available_at, id\) > ROW\(`,
		},
		{
			name: "ClaimOrdered",
			sql:  b.st.ClaimSQL(true),
			// ... clear wait, cursor, from the start, most aggregates to visit.
			args: "'planner', 50, 30000000, 12, false, '', true, 1000, '-infinity'",
			// Heads come from a skip scan of the unfinished-rows index.
			want: []string{name + "_leased", name + "_aggregate_head"},
		},
		{
			name: "Finalize",
			sql:  b.st.FinalizeSQL(),
			// owner, ids, versions, statuses, delays, refunds, errors, created_at as claimed.
			args: `'planner', '{1000, 200500, 201000}', '{1, 1, 1}', '{done, pending, dead}', '{0, 1000000, 0}', '{0, 0, 0}', '{"", timeout, bad}', '{2026-01-01, 2026-01-01, NULL}'`,
			// One probe per write, by its id: never a walk of the
			// processing rows' index filtered by id, which a long
			// transaction elsewhere fills with entries no scan may drop.
			want: []string{name + "_pkey"},
			cond: `\(id = r\.id\)`,
			not:  name + "_leased",
		},
		{
			name: "Heartbeat",
			sql:  b.st.HeartbeatSQL(),
			// owner, ids, versions, lease (30 s in µs).
			args: `'planner', '{1000, 200500, 201000}', '{1, 1, 1}', 30000000`,
			want: []string{name + "_pkey"},
			cond: `\(id = r\.id\)`,
			not:  name + "_leased",
		},
		{
			name: "Purge",
			sql:  b.st.PurgeSQL(),
			// older than (2 h in µs: none is), cursor done_at and id, batch.
			args: "7200000000, '-infinity', 0, 1000",
			// The front of the done index, never a walk of the done rows
			// by id.
			want: []string{name + "_done"},
		},
		{
			name: "Undelivered",
			sql:  b.st.UndeliveredSQL(),
			args: "false",
			want: []string{name + "_ready", name + "_leased"},
		},
		{
			name: "UndeliveredOrdered",
			sql:  b.st.UndeliveredSQL(),
			args: "true",
			want: []string{name + "_ready", name + "_leased"},
			// The "dead head before it?" probe: with no dead rows at all the
			// empty dead index is the cheapest answer; with dead rows it is
			// the aggregate index (TestConsolePlans/UndeliveredOrdered).
			anyOf: []string{name + "_aggregate_head", name + "_dead"},
		},
	} {
		for _, generic := range []bool{false, true} {
			mode := "Custom"
			if generic {
				mode = "Generic"
			}
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				text, plan := explain(t, b.pool, tc.sql, generic, tc.args)
				t.Logf("%s plan (%s), 200000 done and 1000 pending rows:\n%s", tc.name, mode, text)
				requireIndexDriven(t, b.st, plan, tc.want, tc.anyOf)
				if tc.cond != "" {
					require.Regexp(t, `Index Cond: .*`+tc.cond, text)
				}
				if tc.not != "" {
					require.NotContains(t, text, " "+tc.not+" ")
				}
			})
		}
	}
}

// pointLookup is a primary-key condition that probes given ids: one
// claimed row (a join on id) or a bounded list of them (= ANY of an InitPlan
// whose own scan used a partial index).
var pointLookup = regexp.MustCompile(`^\(\S+\.id = (\S+\.id|ANY \(\$\d+\))\)$`)

// requireIndexDriven fails when plan reads the outbox table sequentially or
// walks its primary key, or when it does not use every index in want. A
// primary-key probe for one id (the UPDATE finding the rows the CTEs picked)
// is a point lookup per claimed row, not a walk, and is allowed.
func requireIndexDriven(t *testing.T, st *store.Store, plan planNode, want, anyOf []string) {
	t.Helper()
	name := st.Table.Name
	used := map[string]bool{}
	plan.walk(func(n *planNode) {
		if n.RelationName != name {
			return
		}
		require.NotEqual(t, "Seq Scan", n.NodeType, "sequential scan of %s (alias %s)", name, n.Alias)
		if n.IndexName != "" {
			used[n.IndexName] = true
		}
		if n.IndexName == name+"_pkey" {
			require.Regexp(t, pointLookup, n.IndexCond,
				"primary key of %s used for more than a point lookup (alias %s)", name, n.Alias)
		}
	})
	plan.walk(func(n *planNode) {
		// Bitmap scans name the index on the child node.
		if n.NodeType == "Bitmap Index Scan" {
			used[n.IndexName] = true
			if n.IndexName == name+"_pkey" {
				require.Regexp(t, pointLookup, n.IndexCond)
			}
		}
	})
	for _, idx := range want {
		require.True(t, used[idx], "plan does not use %s; used %s", idx, strings.Join(keys(used), ", "))
	}
	if len(anyOf) > 0 {
		require.True(t, slices.ContainsFunc(anyOf, func(idx string) bool { return used[idx] }),
			"plan uses none of %s; used %s", strings.Join(anyOf, ", "), strings.Join(keys(used), ", "))
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestShardPlansWithOneBusyAggregate proves the shard read and finalize
// stay index-driven, under custom and generic plans, when one aggregate
// holds a backlog of 20,000 messages behind 100,000 done rows: the read
// walks the shard index from its position and probes one step of the
// aggregate index per row, the finalize probes the primary key for the ids
// given (a generic plan that joined every id with every shard was 35 times
// slower in a prototype).
func TestShardPlansWithOneBusyAggregate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 16))
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, done_at)
		SELECT 'order', 'order-' || (g % 1000), 'OrderPlaced', '{}'::jsonb, 'done', 1, now() - interval '1 hour'
		FROM generate_series(1, 100000) AS g`)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'account', 'busy', 'E', '{}'::jsonb FROM generate_series(1, 20000)`)
	b.exec(t, "ANALYZE {{table}}")
	name := b.st.Table.Name
	for _, tc := range []struct {
		name, sql, args string
		want, anyOf     []string
		perRow          bool // the table probed once per write, by id
		gate            string
	}{
		{
			name: "ShardRead",
			sql:  b.st.ShardReadSQL(),
			// shards, tokens, positions (one in the middle of the backlog),
			// rows per shard, owner, ids in flight, aggregates waiting,
			// heads only, ordered.
			args: `'{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}', '{1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1}',
				'{0, 0, 0, 0, 0, 0, 0, 0, 110000, 110000, 110000, 110000, 110000, 110000, 110000, 110000}',
				'{7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7}', 'planner', '{}', '{}', false, true`,
			want: []string{name + "_shard_ready", name + "_aggregate_head"},
		},
		{
			name: "ShardReadUnordered",
			sql:  b.st.ShardReadSQL(),
			args: `'{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}', '{1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1}',
				'{0, 0, 0, 0, 0, 0, 0, 0, 110000, 110000, 110000, 110000, 110000, 110000, 110000, 110000}',
				'{7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7}', 'planner', '{}', '{}', false, false`,
			want: []string{name + "_shard_ready"},
			// the aggregate probe is cut off before it touches an index
			gate: `(?m)One-Time Filter: (false|\$9)$`,
		},
		{
			name: "ShardFinalize",
			sql:  b.st.ShardFinalizeSQL(),
			// owner, shards, tokens, ids, statuses, delays, attempts,
			// errors, created_at, each row's shard.
			args: `'planner', '{3, 9}', '{1, 1}', '{110001, 110002, 110003}', '{done, pending, dead}', '{0, 1000000, 0}',
				'{1, 1, 1}', '{"", timeout, bad}', '{NULL, NULL, NULL}', '{3, 9, 9}'`,
			anyOf:  []string{name + "_pkey", name + "_shard_ready"},
			perRow: true,
		},
	} {
		for _, generic := range []bool{false, true} {
			mode := "Custom"
			if generic {
				mode = "Generic"
			}
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				text, plan := explain(t, b.pool, tc.sql, generic, tc.args)
				t.Logf("%s plan (%s), 100000 done rows and 20000 pending of one aggregate:\n%s", tc.name, mode, text)
				requireIndexDriven(t, b.st, plan, tc.want, tc.anyOf)
				if tc.gate != "" {
					require.Regexp(t, tc.gate, text)
				}
				if !tc.perRow {
					return
				}
				plan.walk(func(n *planNode) {
					if n.RelationName == name && n.IndexName != "" {
						require.Regexp(t, `\(\S*id = \w+\.id\)`, n.IndexCond, "each write one probe by its id:\n%s", text)
						require.NotContains(t, n.IndexCond, "ANY", "every id probed in every shard held:\n%s", text)
					}
				})
			})
		}
	}
}

// TestUndeliveredPlanWithABacklog: Drain's "anything left?" stays
// index-driven when a tenth of the table is pending. The planner expects to
// meet a pending row early in a sequential scan then, but the pending rows
// are the newest, at the end of the heap: a scan read every done row first
// (95 ms per check with a million done rows).
func TestUndeliveredPlanWithABacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, done_at)
		SELECT 'order', 'order-' || (g % 20000), 'OrderPlaced', '{}'::jsonb, 'done', 1, now() - interval '1 hour'
		FROM generate_series(1, 200000) AS g`)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'order-' || (g % 500), 'OrderPaid', '{}'::jsonb
		FROM generate_series(1, 20000) AS g`)
	b.exec(t, "ANALYZE {{table}}")
	name := b.st.Table.Name
	for _, ordered := range []string{"false", "true"} {
		for _, generic := range []bool{false, true} {
			t.Run(fmt.Sprintf("ordered=%s/generic=%t", ordered, generic), func(t *testing.T) {
				text, plan := explain(t, b.pool, b.st.UndeliveredSQL(), generic, ordered)
				t.Logf("plan, 200000 done and 20000 pending rows:\n%s", text)
				requireIndexDriven(t, b.st, plan, []string{name + "_ready", name + "_leased"}, nil)
			})
		}
	}
}
