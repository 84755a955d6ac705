package cli_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testdb"
)

// auditTable is the audit table's identifier for test SQL.
func (c *cli) auditTable() string { return pgx.Identifier{c.schema, "outbox_audit"}.Sanitize() }

// seedBulk inserts rows for the bulk commands: 6 dead (event types A for
// ids[0..2], B for ids[3..5], ids[1] with payload {"n": 5}), and 4 done.
func seedBulk(t *testing.T, c *cli) []int64 {
	t.Helper()
	ids := make([]int64, 10)
	for i := range ids {
		ids[i] = c.insert(t, fmt.Sprintf("agg-%d", i), fmt.Sprintf(`{"n": %d}`, i*4+1))
	}
	q := c.quoted()
	c.exec(t, "UPDATE "+q+` SET status = 'dead', attempts = 5, last_error = 'timeout',
		event_type = CASE WHEN id = ANY($1) THEN 'A' ELSE 'B' END WHERE id = ANY($2)`, ids[:3], ids[:6])
	c.exec(t, "UPDATE "+q+" SET status = 'done', attempts = 1, done_at = now() WHERE id = ANY($1)", ids[6:])
	return ids
}

func testDeadFilter(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	ids := seedBulk(t, c)
	before := c.snapshot(t)

	r := c.ok(t, "dead", "retry", "--table", c.table, "--filter", "event_type=A", "--dry-run")
	require.Equal(t, "would retry 3 messages\n", r.stdout)
	require.Equal(t, before, c.snapshot(t), "a dry run changes nothing")

	r = c.ok(t, "dead", "retry", "--table", c.table, "--filter", "event_type=A", "--filter", "payload=$.n >= 5")
	require.Equal(t, "retried 2 messages\n", r.stdout)
	require.Equal(t, "dead", c.statusOf(t, ids[0]))
	require.Equal(t, "pending", c.statusOf(t, ids[1]))
	require.Equal(t, "pending", c.statusOf(t, ids[2]))

	r = c.ok(t, "dead", "skip", "--table", c.table, "--filter", "status=dead", "--filter", "error=TIME", "--dry-run")
	require.Equal(t, "would skip 4 messages\n", r.stdout)
	r = c.ok(t, "dead", "skip", "--table", c.table, "--filter", "event_type=B")
	require.Equal(t, "skipped 3 messages\n", r.stdout)
	require.Equal(t, 1, c.count(t, "status = 'dead'"))
	require.Equal(t, 3, c.count(t, "status = 'done' AND event_type = 'B' AND last_error = 'timeout'"))

	// Ids and --all keep working, and take --dry-run.
	r = c.ok(t, "dead", "retry", "--table", c.table, "--dry-run", "--all")
	require.Equal(t, "would retry 1 messages\n", r.stdout)
	r = c.ok(t, "dead", "retry", "--table", c.table, "--dry-run", strconv.FormatInt(ids[0], 10), strconv.FormatInt(ids[6], 10))
	require.Equal(t, "would retry 1 messages\n", r.stdout)
	require.Equal(t, 1, c.count(t, "status = 'dead'"))

	// Every write and dry run is audited, with who, what and the filter.
	var n int
	require.NoError(t, testdb.Pool(t).QueryRow(t.Context(), "SELECT count(*) FROM "+c.auditTable()+
		` WHERE actor LIKE 'cli:%' AND finished_at IS NOT NULL`).Scan(&n))
	require.Equal(t, 6, n)
	var filter []string
	var count int64
	var dry bool
	require.NoError(t, testdb.Pool(t).QueryRow(t.Context(), "SELECT filter, count, dry_run FROM "+c.auditTable()+
		" WHERE action = 'dead_retry' AND NOT dry_run").Scan(&filter, &count, &dry))
	require.Equal(t, []string{"event_type=A", "payload=$.n >= 5"}, filter)
	require.Equal(t, int64(2), count)
}

func testReplay(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	ids := seedBulk(t, c)

	r := c.ok(t, "replay", "--table", c.table, "--filter", fmt.Sprintf("id_min=%d", ids[7]), "--dry-run")
	require.Equal(t, "would replay 3 messages\n", r.stdout)
	require.Equal(t, 4, c.count(t, "status = 'done'"))

	r = c.ok(t, "replay", "--table", c.table, "--filter", fmt.Sprintf("id_min=%d", ids[7]), "--filter", "status=done",
		"--name", "fix-7", "--rate", "1000")
	require.Equal(t, "replayed 3 messages\n", r.stdout)
	require.Equal(t, 3, c.count(t, `status = 'pending' AND attempts = 0 AND done_at IS NULL AND headers->>'Outbox-Replay' = 'fix-7'`))
	require.Equal(t, "done", c.statusOf(t, ids[6]))
	var name string
	require.NoError(t, testdb.Pool(t).QueryRow(t.Context(), "SELECT name FROM "+c.auditTable()+
		" WHERE action = 'replay' AND NOT dry_run").Scan(&name))
	require.Equal(t, "fix-7", name)
}

func testBulkBadInput(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	seedBulk(t, c)
	before := c.snapshot(t)
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"dead", "retry", "--filter", "colour=red"}, `"colour"`},
		{[]string{"dead", "skip", "--filter", "evnt_type=A"}, `filter "evnt_type": unknown term (did you mean event_type?)`},
		{[]string{"dead", "retry", "--filter", "id>=3"}, `(did you mean id_min?)`},
		{[]string{"dead", "retry", "--filter", "status=dead"}, "--all"},
		{[]string{"dead", "skip", "--filter", "status=dead"}, "--all"},
		{[]string{"replay", "--filter", "status=done"}, "--all"},
		{[]string{"replay", "--all", "--filter", "event_type=A"}, "not both"},
		{[]string{"dead", "retry", "--filter", "status=pending"}, "dead messages only"},
		{[]string{"dead", "skip", "--filter", "payload=$.n >"}, "jsonpath"},
		{[]string{"dead", "retry", "--filter", "id_min=x", "--dry-run"}, `filter "id_min": "x" is not a message id`},
		{[]string{"dead", "retry", "--all", "--filter", "event_type=A"}, "not both"},
		{[]string{"dead", "skip", "--filter", "event_type=A", "1"}, "one of"},
		{[]string{"replay"}, "--all"},
		{[]string{"replay", "--filter", "header=$$"}, "jsonpath"},
		{[]string{"replay", "--filter", "status=dead"}, "done messages only"},
		{[]string{"replay", "--all", "--name", "no spaces"}, "--name"},
		{[]string{"replay", "--all", "--rate", "-1"}, "--rate"},
	} {
		words := 1 // the command's words come first, then --table and the rest
		if tc.args[0] == "dead" {
			words = 2
		}
		args := append(append(append([]string{}, tc.args[:words]...), "--table", c.table), tc.args[words:]...)
		r := c.run(t, args...)
		requireFailure(t, r, 2)
		require.Regexp(t, `^outboxd: [^\n]*\n$`, r.stderr, "one error line\n%s", r)
		require.Contains(t, r.stderr, tc.mention, "%s", r)
		require.Empty(t, r.stdout)
	}
	require.Equal(t, before, c.snapshot(t), "nothing written")
	var n int
	require.NoError(t, testdb.Pool(t).QueryRow(t.Context(), "SELECT count(*) FROM "+c.auditTable()).Scan(&n))
	require.Zero(t, n, "not even an audit row")
}
