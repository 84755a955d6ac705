package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
)

// A typo in a write's filter is the request's 400 naming the term: it
// never widens the write to every dead letter, starts no job and audits
// nothing.
func TestFilterTypoRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Write: true, Credentials: console.Credentials{Token: testToken}})
	b.seed(t, 21, "Wanted", "dead")
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table
	jobsBefore := c.get("/api/v1/jobs").body
	auditBefore := c.get(api + "/audit").body
	for _, tc := range []struct {
		path  string
		body  map[string]any
		term  string
		count bool
	}{
		{"/dead/skip", map[string]any{"filter": map[string]any{"event-type": "Wanted"}}, "event-type", false},
		{"/dead/retry", map[string]any{"filter": map[string]any{"evnt_type": "X"}, "dry_run": true}, "evnt_type", false},
		{"/replay", map[string]any{"name": "r", "filter": map[string]any{"created_at": "2026-01-01"}}, "created_at", false},
		{"/dead/skip", map[string]any{"filter": map[string]any{"event_type": ""}}, "event_type", false},
		{"/dead/skip", map[string]any{"filter": map[string]any{"status": "pending", "event_type": "Wanted"}}, "status", false},
		{"/dead/skip", map[string]any{"filter": map[string]any{}}, "all", false},
	} {
		resp := c.do(http.MethodPost, api+tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, resp.code, "%v: %s", tc.body, resp.body)
		code, term := errorCodeTerm(t, resp)
		require.Equal(t, "bad_filter", code, resp.body)
		require.Equal(t, tc.term, term, resp.body)
	}
	require.Equal(t, jobsBefore, c.get("/api/v1/jobs").body, "no job was started")
	require.Equal(t, auditBefore, c.get(api+"/audit").body, "nothing was audited")
	require.Equal(t, 21, b.countWhere(t, "status = 'dead'"), "nothing was skipped")

	// Every dead letter, said explicitly.
	resp := c.do(http.MethodPost, api+"/dead/skip", map[string]any{"all": true})
	require.Equal(t, http.StatusAccepted, resp.code, resp.body)
	j := waitJob(t, c, decode2[jobBody](t, resp).Job.ID)
	require.Equal(t, int64(21), j.Done)
	require.Zero(t, b.countWhere(t, "status = 'dead'"))
}

type previewBody struct {
	Count int64 `json:"count"`
	Bound struct {
		MaxID int64  `json:"max_id"`
		Limit *int64 `json:"limit"`
	} `json:"bound"`
}

// The write a preview confirms acts within the preview's bound: matching
// rows that arrive after it are left alone, and the job's total and done
// equal the preview's count.
func TestWritePinnedToPreview(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Write: true, Credentials: console.Credentials{Token: testToken}})
	b.seed(t, 33, "OrderPaid", "done")
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table
	filter := map[string]any{"event_type": "OrderPaid"}
	p := decode[previewBody](t, c.do(http.MethodPost, api+"/replay", map[string]any{"name": "fix", "filter": filter, "dry_run": true}))
	require.Equal(t, int64(33), p.Count)
	require.NotNil(t, p.Bound.Limit)
	require.Equal(t, int64(33), *p.Bound.Limit)
	require.Positive(t, p.Bound.MaxID)

	b.seed(t, 2, "OrderPaid", "done") // producers and dispatchers carry on
	resp := c.do(http.MethodPost, api+"/replay", map[string]any{"name": "fix", "filter": filter, "bound": p.Bound})
	require.Equal(t, http.StatusAccepted, resp.code, resp.body)
	j := waitJob(t, c, decode2[jobBody](t, resp).Job.ID)
	require.Equal(t, console.JobDone, j.State, j.Error)
	require.Equal(t, int64(33), j.Total)
	require.Equal(t, int64(33), j.Done)
	require.Equal(t, 2, b.countWhere(t, "status = 'done'"), "the newer rows are left alone")

	// Lifted on request.
	resp = c.do(http.MethodPost, api+"/replay", map[string]any{"name": "fix-2", "filter": filter, "include_newer": true})
	require.Equal(t, http.StatusAccepted, resp.code, resp.body)
	j = waitJob(t, c, decode2[jobBody](t, resp).Job.ID)
	require.Equal(t, int64(2), j.Done)

	bad := c.do(http.MethodPost, api+"/replay", map[string]any{"name": "x", "filter": filter, "bound": p.Bound, "include_newer": true})
	require.Equal(t, http.StatusBadRequest, bad.code, bad.body)
}
