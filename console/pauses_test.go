package console_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
)

// The pause API: a route and the whole table paused and resumed, each
// audited with who asked; pausing twice keeps the first pause; a resume
// of what is not paused is a 409, a bad route or reason a 400, a
// read-only console a 403; the overview lists the pauses with their
// Resume buttons.
func TestPauseAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Write: true, Credentials: console.Credentials{Token: testToken}})
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table

	r := c.do("POST", api+"/routes/partner/pause", map[string]string{"reason": "maintenance"})
	require.Equal(t, 200, r.code, r.body)
	var p console.PauseAnswer
	require.NoError(t, json.Unmarshal([]byte(r.body), &p))
	require.True(t, p.Made)
	require.Equal(t, "partner", p.Pause.Route)
	require.Equal(t, "maintenance", p.Pause.Reason)
	require.NotEmpty(t, p.Pause.By)
	r = c.do("POST", api+"/routes/partner/pause", nil)
	require.Equal(t, 200, r.code, r.body)
	var again console.PauseAnswer
	require.NoError(t, json.Unmarshal([]byte(r.body), &again))
	require.False(t, again.Made)
	require.Equal(t, "maintenance", again.Pause.Reason, "the pause in force is kept")
	r = c.do("POST", api+"/pause", nil)
	require.Equal(t, 200, r.code, r.body)

	r = c.get(api + "/pauses")
	require.Equal(t, 200, r.code, r.body)
	var list struct {
		Pauses []map[string]any `json:"pauses"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &list))
	require.Len(t, list.Pauses, 2)
	require.Empty(t, list.Pauses[0]["route"], "the whole table's first")
	require.Equal(t, "partner", list.Pauses[1]["route"])
	require.Equal(t, []string{"at", "by", "reason", "route"}, sortedKeys(list.Pauses[1]))
	r = c.get(api + "/overview")
	require.Contains(t, r.body, `"paused": [`)
	r = c.get("/api/v1/status")
	require.Contains(t, r.body, `"route": "partner"`)

	pc := b.client(t, nil)
	pc.login(map[string][]string{"token": {testToken}})
	page := pc.get("/t/" + b.table + "/")
	require.Contains(t, page.body, `id="table-paused"`)
	require.Contains(t, page.body, `<button type="button" class="resume primary" data-route="partner">Resume</button>`)
	require.Contains(t, page.body, `id="pause-form"`)

	r = c.do("POST", api+"/routes/partner/resume", nil)
	require.Equal(t, 200, r.code, r.body)
	var res console.ResumeAnswer
	require.NoError(t, json.Unmarshal([]byte(r.body), &res))
	require.Equal(t, "partner", res.Lifted.Route)
	r = c.do("POST", api+"/routes/partner/resume", nil)
	require.Equal(t, 409, r.code, r.body)
	require.Equal(t, "not_paused", errorCode(t, r))
	r = c.do("POST", api+"/resume", nil)
	require.Equal(t, 200, r.code, r.body)
	require.Contains(t, pc.get("/t/"+b.table+"/").body, `id="no-pauses"`)

	audit, err := b.admin.AuditList(t.Context(), 10)
	require.NoError(t, err)
	var seen []string
	for _, e := range audit {
		seen = append(seen, e.Action+" "+e.Name+" "+e.Actor)
	}
	require.Contains(t, seen, "pause partner token")
	require.Contains(t, seen, "resume  token")

	for _, tc := range []struct {
		path string
		body any
		code int
		err  string
	}{
		{api + "/routes/" + strings.Repeat("r", 201) + "/pause", nil, 400, "bad_route"},
		{api + "/routes/a%09b/pause", nil, 400, "bad_route"},
		{api + "/pause", map[string]string{"reason": "two\nlines"}, 400, "bad_reason"},
		{api + "/pause", `{"reason": 3}`, 400, "bad_request"},
		{api + "/pause", `{"why": "x"}`, 400, "bad_request"},
		{"/api/v1/tables/nope/pause", nil, 404, "unknown_table"},
	} {
		r := c.do("POST", tc.path, tc.body)
		require.Equal(t, tc.code, r.code, "%s: %s", tc.path, r.body)
		require.Equal(t, tc.err, errorCode(t, r), tc.path)
	}

	ro := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	r = ro.client(t, bearer(testToken)).do("POST", "/api/v1/tables/"+ro.table+"/pause", nil)
	require.Equal(t, 403, r.code, r.body)
	require.Equal(t, "read_only", errorCode(t, r))
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The overview lists the destinations the dispatchers limit, with the
// backpressure they reported, and the paused ones; a dispatcher whose
// sink's breaker is open is marked.
func TestOverviewDestinations(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	_, _, err := b.admin.Pause(t.Context(), "alice", "crm", "")
	require.NoError(t, err)
	dispatchersTable := pgx.Identifier{strings.TrimSuffix(b.table, ".outbox"), "outbox_dispatchers"}.Sanitize()
	b.exec(t, `INSERT INTO `+dispatchersTable+` (owner, host, version, lease_mode, beat_us, in_flight, delivered_1m, flow)
		VALUES ('relay-a', 'web-1', 'v1', 'row', 10000000, 3, 40, '{"sink_paused": true, "destinations": [{"name": "partner",
		"rate": 50, "burst": 10, "concurrency": 4, "rate_share": 50, "concurrency_share": 4, "in_flight": 3, "waiting": 12,
		"handed_back": 40, "held_seconds": 20}]}')`)
	c := b.client(t, bearer(testToken))
	r := c.get("/api/v1/tables/" + b.table + "/overview")
	require.Equal(t, 200, r.code, r.body)
	var o console.Overview
	require.NoError(t, json.Unmarshal([]byte(r.body), &o))
	require.Len(t, o.Destinations, 2)
	require.Equal(t, "crm", o.Destinations[0].Name)
	require.NotNil(t, o.Destinations[0].Paused)
	p := o.Destinations[1]
	require.Equal(t, "partner", p.Name)
	require.Equal(t, int64(12), p.Waiting)
	require.Equal(t, int64(40), p.HandedBack)
	require.True(t, o.Dispatchers[0].SinkPaused)

	pc := b.client(t, nil)
	pc.login(map[string][]string{"token": {testToken}})
	page := pc.get("/t/" + b.table + "/")
	require.Equal(t, 200, page.code, page.body)
	require.Contains(t, page.body, `<tr data-destination="partner">`)
	require.Contains(t, page.body, "50/s, burst 10; 4 at once")
	require.Contains(t, page.body, "500ms", "the mean wait")
	require.Contains(t, page.body, ">sink paused</span>")
}
