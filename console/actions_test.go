package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
)

type jobBody struct {
	Job console.JobView `json:"job"`
}

type countBody struct {
	Count int64 `json:"count"`
}

// waitJob polls a job until it leaves the running state.
func waitJob(t *testing.T, c *client, id string) console.JobView {
	t.Helper()
	var j console.JobView
	require.Eventually(t, func() bool {
		j = decode[console.JobView](t, c.get("/api/v1/jobs/"+id))
		return j.State != console.JobRunning
	}, 30*time.Second, 20*time.Millisecond)
	return j
}

func (b *testBundle) countWhere(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	q := "SELECT count(*) FROM " + b.quoted + " WHERE " + where
	require.NoError(t, b.pool.QueryRow(t.Context(), q, args...).Scan(&n))
	return n
}

func TestDeadActions(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Write: true, Credentials: console.Credentials{Token: testToken}})
	b.seed(t, 1200, "PaymentFailed", "dead")
	b.seed(t, 10, "EmailBounced", "dead")
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table

	// A selection moves at once; ids not dead are left alone.
	var ids []int64
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM "+b.quoted+
		" WHERE event_type = 'EmailBounced' ORDER BY id LIMIT 3) s").Scan(&ids))
	r := decode[countBody](t, c.do(http.MethodPost, api+"/dead/skip", map[string]any{"ids": ids[:2]}))
	require.Equal(t, int64(2), r.Count)
	r = decode[countBody](t, c.do(http.MethodPost, api+"/dead/retry", map[string]any{"ids": ids}))
	require.Equal(t, int64(1), r.Count, "two of them are done now")
	require.Equal(t, 2, b.countWhere(t, "id = ANY($1) AND status = 'done'", ids))
	require.Equal(t, 1, b.countWhere(t, "id = ANY($1) AND status = 'pending' AND attempts = 0", ids))

	// All matching: a preview, then a tracked job.
	filter := map[string]any{"event_type": "PaymentFailed", "error": "timeout"}
	r = decode[countBody](t, c.do(http.MethodPost, api+"/dead/retry", map[string]any{"filter": filter, "dry_run": true}))
	require.Equal(t, int64(1200), r.Count)
	require.Equal(t, 1207, b.countWhere(t, "status = 'dead'"), "a dry run changes nothing")
	resp := c.do(http.MethodPost, api+"/dead/retry", map[string]any{"filter": filter})
	require.Equal(t, http.StatusAccepted, resp.code, resp.body)
	job := decode2[jobBody](t, resp).Job
	require.Equal(t, "dead_retry", job.Kind)
	require.Equal(t, "token", job.Actor)
	done := waitJob(t, c, job.ID)
	require.Equal(t, console.JobDone, done.State, done.Error)
	require.Equal(t, int64(1200), done.Done)
	require.Equal(t, int64(1200), done.Total)
	require.Equal(t, 0, b.countWhere(t, "status = 'dead' AND event_type = 'PaymentFailed'"))
	require.Equal(t, 7, b.countWhere(t, "status = 'dead'"), "other dead messages untouched")

	// Every write is audited, dry runs included, and the jobs are listed.
	audit := decode[struct {
		Entries []console.AuditView `json:"entries"`
	}](t, c.get(api+"/audit"))
	require.Len(t, audit.Entries, 4)
	require.Equal(t, "dead_retry", audit.Entries[0].Action)
	require.Equal(t, int64(1200), audit.Entries[0].Count)
	require.Equal(t, "token", audit.Entries[0].Actor)
	require.True(t, audit.Entries[1].DryRun)
	require.Contains(t, b.logs.String(), "outbox audit")
	jobs := decode[struct {
		Jobs []console.JobView `json:"jobs"`
	}](t, c.get("/api/v1/jobs"))
	require.Equal(t, job.ID, jobs.Jobs[0].ID)

	for name, body := range map[string]string{
		"Both":         `{"ids": [1], "filter": {"event_type": "A"}}`,
		"Empty":        `{"filter": {}}`,
		"StatusOnly":   `{"filter": {"status": "dead"}}`,
		"AllAndTerms":  `{"filter": {"event_type": "A"}, "all": true}`,
		"Null":         `{"filter": {"event_type": null}}`,
		"Object":       `{"filter": {"event_type": {"eq": "A"}}}`,
		"Neither":      `{}`,
		"UnknownField": `{"filter": {}, "everything": true}`,
		"BadFilter":    `{"filter": {"status": "lost"}}`,
		"BadPath":      `{"filter": {"payload": "$.a >>> 1"}, "dry_run": true}`,
		"NotJSON":      `retry please`,
	} {
		resp := c.do(http.MethodPost, api+"/dead/retry", body)
		require.Equal(t, http.StatusBadRequest, resp.code, name+": "+resp.body)
	}
	many := make([]int64, 501)
	require.Equal(t, http.StatusBadRequest, c.do(http.MethodPost, api+"/dead/retry", map[string]any{"ids": many}).code)
}

func decode2[T any](t *testing.T, r response) T {
	t.Helper()
	r.code = http.StatusOK
	return decode[T](t, r)
}

func TestReplayJob(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Write: true, Credentials: console.Credentials{Token: testToken}})
	b.seed(t, 40, "OrderPaid", "done")
	b.seed(t, 5, "OrderShipped", "done")
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table
	filter := map[string]any{"event_type": "OrderPaid"}

	r := decode[countBody](t, c.do(http.MethodPost, api+"/replay", map[string]any{"name": "fix-1", "filter": filter, "dry_run": true}))
	require.Equal(t, int64(40), r.Count)
	resp := c.do(http.MethodPost, api+"/replay", map[string]any{"name": "fix-1", "filter": filter})
	require.Equal(t, http.StatusAccepted, resp.code, resp.body)
	done := waitJob(t, c, decode2[jobBody](t, resp).Job.ID)
	require.Equal(t, console.JobDone, done.State, done.Error)
	require.Equal(t, int64(40), done.Done)
	require.Equal(t, 40, b.countWhere(t, "status = 'pending' AND event_type = 'OrderPaid'"))
	require.Equal(t, 5, b.countWhere(t, "status = 'done'"))

	// A slow replay is cancelled between batches; what moved stays moved.
	b.seed(t, 200, "InvoiceIssued", "done")
	resp = c.do(http.MethodPost, api+"/replay", map[string]any{"name": "slow", "rate": 20, "filter": map[string]any{"event_type": "InvoiceIssued"}})
	require.Equal(t, http.StatusAccepted, resp.code, resp.body)
	id := decode2[jobBody](t, resp).Job.ID
	cancelled := c.do(http.MethodPost, "/api/v1/jobs/"+id+"/cancel", nil)
	require.Equal(t, http.StatusAccepted, cancelled.code, cancelled.body)
	j := waitJob(t, c, id)
	require.Equal(t, console.JobCancelled, j.State)
	require.Less(t, j.Done, int64(200))
	require.Equal(t, int(j.Done), b.countWhere(t, "status = 'pending' AND event_type = 'InvoiceIssued'"))

	require.Equal(t, http.StatusBadRequest, c.do(http.MethodPost, api+"/replay", map[string]any{"filter": filter}).code, "no name")
	require.Equal(t, http.StatusBadRequest, c.do(http.MethodPost, api+"/replay", map[string]any{"name": "x", "rate": -1, "filter": filter}).code)
	bad := c.do(http.MethodPost, api+"/replay", map[string]any{"name": "no spaces please", "filter": filter, "dry_run": true})
	require.Equal(t, http.StatusBadRequest, bad.code, bad.body)
	require.Contains(t, bad.body, "no spaces please")

	// Without dry_run too, a bad name is the request's 400, not a job that fails.
	jobsBefore := c.get("/api/v1/jobs").body
	bad = c.do(http.MethodPost, api+"/replay", map[string]any{"name": "bad/name", "filter": filter})
	require.Equal(t, http.StatusBadRequest, bad.code, bad.body)
	require.Equal(t, "bad_request", errorCode(t, bad))
	require.Contains(t, bad.body, `replay: Name \"bad/name\" must be`)
	require.Equal(t, jobsBefore, c.get("/api/v1/jobs").body, "no job was started")
	require.Equal(t, http.StatusNotFound, c.do(http.MethodPost, "/api/v1/jobs/999/cancel", nil).code)

	// At most MaxRunningJobs run at once; one more is refused 429 until
	// one ends.
	b.seed(t, 50, "Slow", "done")
	var ids []string
	for i := range console.MaxRunningJobs {
		resp := c.do(http.MethodPost, api+"/replay", map[string]any{"name": fmt.Sprintf("slow-%d", i), "rate": 0.01,
			"filter": map[string]any{"event_type": "Slow"}})
		require.Equal(t, http.StatusAccepted, resp.code, resp.body)
		ids = append(ids, decode2[jobBody](t, resp).Job.ID)
	}
	more := c.do(http.MethodPost, api+"/replay", map[string]any{"name": "one-more", "filter": map[string]any{"event_type": "Slow"}})
	require.Equal(t, http.StatusTooManyRequests, more.code, more.body)
	require.Equal(t, "too_many_jobs", errorCode(t, more))
	require.NotEmpty(t, more.header.Get("Retry-After"))
	require.Equal(t, http.StatusAccepted, c.do(http.MethodPost, "/api/v1/jobs/"+ids[0]+"/cancel", nil).code)
	require.Equal(t, console.JobCancelled, waitJob(t, c, ids[0]).State)
	again := c.do(http.MethodPost, api+"/replay", map[string]any{"name": "one-more", "rate": 0.01, "filter": map[string]any{"event_type": "Slow"}})
	require.Equal(t, http.StatusAccepted, again.code, again.body)
	for _, id := range append(ids[1:], decode2[jobBody](t, again).Job.ID) {
		c.do(http.MethodPost, "/api/v1/jobs/"+id+"/cancel", nil)
		waitJob(t, c, id)
	}
}

func TestAuditPage(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Write: true, Credentials: console.Credentials{User: "ops", Password: "pw"}})
	b.seed(t, 3, "PaymentFailed", "dead")
	c := b.client(t, nil)
	tok := c.login(url.Values{"user": {"ops"}, "password": {"pw"}})
	resp := c.do(http.MethodPost, "/api/v1/tables/"+b.table+"/dead/retry", map[string]any{"filter": map[string]any{}, "dry_run": true},
		func(r *http.Request) { r.Header.Set(console.CSRFHeader, tok) })
	require.Equal(t, http.StatusOK, resp.code, resp.body)
	page := c.get("/t/" + b.table + "/audit")
	require.Equal(t, http.StatusOK, page.code)
	require.Contains(t, page.body, "<td>ops</td><td>dead_retry</td>")
	require.Contains(t, page.body, fmt.Sprintf(`<td class="num">%d</td><td>yes</td>`, 3))
}

// A filter the store would refuse, in a bulk action that is not a dry run,
// is the request's 400: no job is started and nothing is audited.
func TestBulkBadFilterRefusedBeforeJob(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Write: true, Credentials: console.Credentials{Token: testToken}})
	b.seed(t, 3, "OrderPaid", "dead")
	b.seed(t, 3, "OrderPaid", "done")
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table
	jobsBefore := c.get("/api/v1/jobs").body
	auditBefore := c.get(api + "/audit").body
	for name, req := range map[string]struct {
		path string
		body map[string]any
	}{
		"RetryBadPayload": {"/dead/retry", map[string]any{"filter": map[string]any{"payload": "$.a >>> 1"}}},
		"SkipBadHeader":   {"/dead/skip", map[string]any{"filter": map[string]any{"header": "$$bad"}}},
		"ReplayBadPath":   {"/replay", map[string]any{"name": "fix-2", "filter": map[string]any{"payload": "$.a >>> 1"}}},
	} {
		resp := c.do(http.MethodPost, api+req.path, req.body)
		require.Equal(t, http.StatusBadRequest, resp.code, name+": "+resp.body)
		code, term := errorCodeTerm(t, resp)
		require.Equal(t, "bad_filter", code, name)
		require.Contains(t, []string{"payload", "header"}, term, name)
	}
	require.Equal(t, jobsBefore, c.get("/api/v1/jobs").body, "no job was started")
	require.Equal(t, auditBefore, c.get(api+"/audit").body, "nothing was audited")
	require.Equal(t, 3, b.countWhere(t, "status = 'dead'"))
	require.Equal(t, 3, b.countWhere(t, "status = 'done'"))
}

// TestPreviewIsBounded: a dry run's count is the bounded one, so a filter no
// index serves previews among the newest rows of the window, says so, and is
// audited with that count.
func TestPreviewIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}, Write: true, SearchWindow: 40})
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, done_at, last_error)
	           SELECT 'order', g::text, 'OrderPaid', '{}', 'done', now(), CASE WHEN g IN (5, 130) THEN 'disk full' END
	           FROM generate_series(1, 150) AS g`)
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table
	type previewBody struct {
		Count    int64 `json:"count"`
		Capped   bool  `json:"capped"`
		Partial  bool  `json:"partial"`
		Searched int64 `json:"searched"`
	}
	got := decode[previewBody](t, c.do(http.MethodPost, api+"/replay",
		map[string]any{"name": "fix-2", "filter": map[string]any{"error": "disk"}, "dry_run": true}))
	require.Equal(t, previewBody{Count: 1, Capped: true, Partial: true, Searched: 40}, got)
	got = decode[previewBody](t, c.do(http.MethodPost, api+"/replay",
		map[string]any{"name": "fix-2", "filter": map[string]any{"aggregate_type": "order"}, "dry_run": true}))
	require.Equal(t, previewBody{Count: 40, Capped: true, Partial: true, Searched: 40}, got, "every row of the window matches")
	require.Equal(t, 0, b.countWhere(t, "status = 'pending'"), "a dry run changes nothing")
	audit := decode[struct {
		Entries []struct {
			Count  int64 `json:"count"`
			DryRun bool  `json:"dry_run"`
		} `json:"entries"`
	}](t, c.get(api+"/audit"))
	require.Len(t, audit.Entries, 2)
	require.Equal(t, int64(1), audit.Entries[1].Count, "audited with the count it answered")
	require.True(t, audit.Entries[1].DryRun)
}
