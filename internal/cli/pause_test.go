package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testdb"
)

// outboxd pause and resume: a paused route receives nothing while the
// other route goes on; status shows the pause, by whom and why; resume
// delivers the backlog; bad input is one line and exit 2, a resume of
// what is not paused one line and exit 1.
func TestPauseCommands(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	c := newCLI(t, bin)
	c.migrate(t)

	r := c.ok(t, "pause", "--table", c.table, "--route", "partner", "--reason", "partner maintenance")
	require.Regexp(t, `^paused route "partner" of `+c.table+` by cli:\S+ since \d{4}-\d\d-\d\dT\S+Z \(partner maintenance\): its messages wait, pending, until `+"`outboxd resume`\n$", r.stdout)
	r = c.ok(t, "pause", "--table", c.table, "--route", "partner", "--json")
	var again struct {
		Route, By, Reason string
		At                time.Time
		Made              bool
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &again), r.stdout)
	require.False(t, again.Made, "paused already")
	require.Equal(t, "partner maintenance", again.Reason, "the pause in force is kept")

	r = c.ok(t, "status", "--table", c.table)
	require.Regexp(t, `(?m)^paused\s+route "partner" by cli:\S+ since \S+ \(partner maintenance\)$`, r.stdout)
	require.Regexp(t, `(?m)^destinations\s+partner; paused by cli:\S+ since \S+ \(partner maintenance\)$`, r.stdout)
	r = c.ok(t, "status", "--table", c.table, "--json")
	var st struct {
		Pauses []map[string]any `json:"pauses"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Pauses, 1)
	require.Equal(t, "partner", st.Pauses[0]["route"])
	require.Equal(t, "partner maintenance", st.Pauses[0]["reason"])

	recv := &arrivals{at: map[string][]time.Time{}}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	const slow, fast = 10, 20
	c.exec(t, fmt.Sprintf(`INSERT INTO %[1]s (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 's' || (i %% 3), 'Slow', '{}' FROM generate_series(1, %[2]d) i;
		INSERT INTO %[1]s (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'f' || i, 'Fast', '{}' FROM generate_series(1, %[3]d) i`, c.quoted(), slow, fast))
	start(t, bin, c.env, nil, "run", "--table", c.table, "--ordered", "--poll-interval", "100ms",
		"--route", "name=partner,event_type=Slow="+srv.URL+"/slow", "--sink", srv.URL+"/fast")
	require.Eventually(t, func() bool { return len(recv.times("/fast")) == fast }, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return c.count(t, "last_error = 'held back: its destination is paused'") == 3 }, 20*time.Second, 20*time.Millisecond,
		"each aggregate's head held back")
	require.Empty(t, recv.times("/slow"), "the paused route received nothing")
	require.Zero(t, c.count(t, "event_type = 'Slow' AND attempts > 0"), "no attempt spent")

	r = c.ok(t, "resume", "--table", c.table, "--route", "partner")
	require.Regexp(t, `^resumed route "partner" of `+c.table+` \(paused by cli:\S+ since \S+ \(partner maintenance\)\); 3 held messages made due\n$`, r.stdout)
	require.Eventually(t, func() bool { return len(recv.times("/slow")) == slow }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, slow+fast, c.count(t, "status = 'done' AND attempts = 1"), "every message once, no attempt spent waiting")
	require.NotContains(t, c.ok(t, "status", "--table", c.table).stdout, "paused")

	r = c.run(t, "resume", "--table", c.table, "--route", "partner")
	requireFailure(t, r, 1)
	require.Equal(t, `outboxd: resume: route "partner" of `+c.table+" is not paused\n", r.stderr)
	for _, args := range [][]string{
		{"pause", "--route", ""},
		{"pause", "--route", "a\tb"},
		{"pause", "--route", strings.Repeat("r", 201)},
		{"pause", "--reason", "two\nlines"},
		{"resume", "--route", ""},
		{"pause", "extra"},
	} {
		r = c.run(t, append(args, "--table", c.table)...)
		requireFailure(t, r, 2)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one error line: %s", r.stderr)
	}

	// The whole table, and the audit of every write.
	r = c.ok(t, "pause", "--table", c.table)
	require.Contains(t, r.stdout, "paused table "+c.table+" by cli:")
	require.Regexp(t, `(?m)^paused\s+the whole table by cli:`, c.ok(t, "status", "--table", c.table).stdout)
	r = c.ok(t, "resume", "--table", c.table, "--json")
	var res struct {
		Lifted map[string]any `json:"lifted"`
		Woke   int64          `json:"woke"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	require.Empty(t, res.Lifted["route"])
	var actions []string
	rows, err := testdb.Pool(t).Query(t.Context(), "SELECT action || ' ' || coalesce(name, '*') FROM "+c.auditTable()+" ORDER BY id")
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		actions = append(actions, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"pause partner", "pause partner", "resume partner", "resume partner", "pause *", "resume *"}, actions)
}
