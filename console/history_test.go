package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/console"
)

// relayWithFailures enqueues one message and relays the table through a
// sink that fails that message three times (503, 500, then a connection
// error without a status) before it delivers it; it returns its id.
func (b *testBundle) relayWithFailures(t *testing.T) int64 {
	t.Helper()
	id := b.enqueueOne(t, "o-1")
	var calls atomic.Int32
	sink := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
		if m.ID != id {
			return nil
		}
		switch calls.Add(1) {
		case 1:
			return outbox.WithResponseStatus(outbox.Retryable(errors.New("HTTP 503: upstream timeout")), 503)
		case 2:
			return outbox.WithResponseStatus(outbox.Retryable(errors.New("HTTP 500: <b>oops</b>")), 500)
		case 3:
			return outbox.Retryable(errors.New("connection refused"))
		}
		return nil
	})
	d, err := outbox.NewDispatcher(b.pool, sink, &outbox.Config{Table: b.table, Owner: "relay-a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		PollInterval: 20 * time.Millisecond, RetryBase: time.Millisecond, RetryCap: 2 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, d.Drain(ctx))
	return id
}

func (b *testBundle) enqueueOne(t *testing.T, aggregateID string) int64 {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(t.Context()) //nolint:errcheck // no-op after commit
	ids, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx,
		outbox.NewMessage{AggregateType: "order", AggregateID: aggregateID, EventType: "OrderPaid", Payload: map[string]int{"n": 1}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))
	return ids[0]
}

// The message API returns the attempt history, newest first, in the shape
// the API documents; the message page tells it in its timeline.
func TestMessageAttemptHistory(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	id := b.relayWithFailures(t)
	c := b.client(t, bearer(testToken))
	r := c.get(fmt.Sprintf("/api/v1/tables/%s/messages/%d", b.table, id))
	require.Equal(t, 200, r.code, r.body)
	var raw struct {
		History []map[string]json.RawMessage `json:"history"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &raw))
	require.Len(t, raw.History, 3)
	for _, h := range raw.History {
		keys := make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		require.ElementsMatch(t, []string{"at", "dispatcher", "attempt", "duration_ms", "outcome", "error", "status"}, keys)
	}
	d := decode[console.MessageDetailView](t, r)
	require.Equal(t, "done", d.Status)
	require.Nil(t, d.History[0].Status, "a sink without a status code: null")
	require.Equal(t, "null", string(raw.History[0]["status"]))
	require.Equal(t, 500, *d.History[1].Status)
	require.Equal(t, 503, *d.History[2].Status)
	for i, h := range d.History {
		require.Equal(t, 3-i, h.Attempt, "newest first")
		require.Equal(t, "retry", h.Outcome)
		require.Equal(t, "relay-a", h.Dispatcher)
		require.Positive(t, h.DurationMS)
	}
	require.Contains(t, d.History[2].Error, "upstream timeout")

	// A message delivered at once has an empty history, not null.
	r = c.get(fmt.Sprintf("/api/v1/tables/%s/messages/%d", b.table, b.enqueueOne(t, "o-2")))
	require.Contains(t, r.body, `"history": []`)

	pc := b.client(t, nil)
	pc.login(map[string][]string{"token": {testToken}})
	page := pc.get(fmt.Sprintf("/t/%s/messages/%d", b.table, id))
	require.Equal(t, 200, page.code)
	require.Equal(t, 3, strings.Count(page.body, `<details class="attempt">`))
	require.Contains(t, page.body, "Attempt 1: failed, retried (503)")
	require.Contains(t, page.body, "Attempt 3: failed, retried</strong>", "no status, none shown")
	require.Contains(t, page.body, "HTTP 500: &lt;b&gt;oops&lt;/b&gt;", "the error is escaped")
	require.Less(t, strings.Index(page.body, "Attempt 1:"), strings.Index(page.body, "Attempt 3:"), "the timeline runs oldest first")
}

// Retry now: a message waiting for a later attempt is made due now,
// audited with who asked; anything else is a 409 naming why, and the
// message page offers it only while the message waits.
func TestRetryNowAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Write: true, Credentials: console.Credentials{Token: testToken}})
	waiting, dead := b.enqueueOne(t, "w"), b.enqueueOne(t, "d")
	b.exec(t, `UPDATE {{table}} SET attempts = 1, available_at = now() + interval '1 hour', last_error = 'busy' WHERE id = $1`, waiting)
	b.exec(t, `UPDATE {{table}} SET status = 'dead', attempts = 12 WHERE id = $1`, dead)
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table + "/messages/"

	pc := b.client(t, nil)
	pc.login(map[string][]string{"token": {testToken}})
	require.Contains(t, pc.get(fmt.Sprintf("/t/%s/messages/%d", b.table, waiting)).body, `id="retry-now"`)
	require.NotContains(t, pc.get(fmt.Sprintf("/t/%s/messages/%d", b.table, dead)).body, `id="retry-now"`)

	r := c.do("POST", fmt.Sprintf("%s%d/retry-now", api, waiting), nil)
	require.Equal(t, 200, r.code, r.body)
	require.JSONEq(t, `{"count": 1}`, r.body)
	m, err := b.admin.Message(t.Context(), waiting)
	require.NoError(t, err)
	require.False(t, m.AvailableAt.After(time.Now().Add(time.Minute)), "due now")
	require.Equal(t, 1, m.Attempts, "the attempts used stay used")
	audit, err := b.admin.AuditList(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, "retry_now", audit[0].Action)
	require.Equal(t, []string{fmt.Sprintf("id=%d", waiting)}, audit[0].Filter)
	require.NotContains(t, pc.get(fmt.Sprintf("/t/%s/messages/%d", b.table, waiting)).body, `id="retry-now"`, "due now: nothing to offer")

	for _, tc := range []struct {
		id, code int
		errCode  string
		msg      string
	}{
		{int(waiting), 409, "not_waiting", "is due already"},
		{int(dead), 409, "not_waiting", "it is dead"},
		{999999, 404, "not_found", "no message 999999"},
	} {
		r := c.do("POST", fmt.Sprintf("%s%d/retry-now", api, tc.id), nil)
		require.Equal(t, tc.code, r.code, r.body)
		require.Equal(t, tc.errCode, errorCode(t, r))
		require.Contains(t, r.body, tc.msg)
	}
	r = c.do("POST", api+"abc/retry-now", nil)
	require.Equal(t, 400, r.code, r.body)

	ro := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	r = ro.client(t, bearer(testToken)).do("POST", "/api/v1/tables/"+ro.table+"/messages/1/retry-now", nil)
	require.Equal(t, 403, r.code, r.body)
	require.Equal(t, "read_only", errorCode(t, r))
}

// The top-errors page and its API group dead letters by event type and
// error shape; a group's link opens the dead-letter page on its filter.
func TestTopErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	for i := range 5 {
		id := b.enqueueOne(t, fmt.Sprint("o-", i))
		text := fmt.Sprintf("POST https://hooks.example.com/o/%d: 503 Service Unavailable", i)
		if i == 4 {
			text = "receiver's answer: 422 total isn't a number"
		}
		b.exec(t, `UPDATE {{table}} SET status = 'dead', attempts = 5, last_error = $2 WHERE id = $1`, id, text)
	}
	c := b.client(t, bearer(testToken))
	r := c.get("/api/v1/tables/" + b.table + "/dead/top")
	var top struct {
		Scanned int64 `json:"scanned"`
		More    bool  `json:"more"`
		Groups  []struct {
			Count  int64    `json:"count"`
			Shape  string   `json:"shape"`
			Filter []string `json:"filter"`
		} `json:"groups"`
	}
	require.Equal(t, 200, r.code, r.body)
	require.NoError(t, json.Unmarshal([]byte(r.body), &top))
	require.EqualValues(t, 5, top.Scanned)
	require.False(t, top.More)
	require.Len(t, top.Groups, 2)
	require.EqualValues(t, 4, top.Groups[0].Count)
	require.Equal(t, "POST <url>: <n> Service Unavailable", top.Groups[0].Shape)
	for _, q := range []string{"limit=0", "scan=abc", "limit=1001"} {
		r := c.get("/api/v1/tables/" + b.table + "/dead/top?" + q)
		require.Equal(t, 400, r.code, q)
		require.Equal(t, "bad_request", errorCode(t, r), q)
	}

	pc := b.client(t, nil)
	pc.login(map[string][]string{"token": {testToken}})
	page := pc.get("/t/" + b.table + "/dead/top")
	require.Equal(t, 200, page.code)
	require.Equal(t, 2, strings.Count(page.body, `class="group-link"`))
	require.Contains(t, page.body, `href="/t/`+b.table+`/dead?error=Service%20Unavailable&amp;event_type=OrderPaid"`)
	require.Contains(t, page.body, "receiver&#39;s answer: &lt;n&gt; total isn&#39;t a number", "shapes are escaped")
	dead := pc.get("/t/" + b.table + "/dead?error=Service%20Unavailable&event_type=OrderPaid")
	require.Contains(t, dead.body, `data-n="4"`, "the group's link selects the group")
}

// The message page and API mark the headers a sink leaves out, with why.
func TestMessageMarksHeadersNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	id := b.enqueueOne(t, "h")
	b.exec(t, `UPDATE {{table}} SET headers = $2 WHERE id = $1`, id,
		`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "Outbox-Id": "forged", "X-Split": "a\r\nX-Smuggled: yes", "Content-Type": "text/plain"}`)
	c := b.client(t, bearer(testToken))
	d := decode[console.MessageDetailView](t, c.get(fmt.Sprintf("/api/v1/tables/%s/messages/%d", b.table, id)))
	require.Equal(t, map[string]string{
		"Outbox-Id":    "not sent by any sink: Outbox- names are the relay's own",
		"X-Split":      "not sent over HTTP (webhooks): a value with a line break or another control character",
		"Content-Type": "not sent over HTTP (webhooks): a name the webhook sink sets itself or HTTP reserves",
	}, d.NotSent)
	pc := b.client(t, nil)
	pc.login(map[string][]string{"token": {testToken}})
	page := pc.get(fmt.Sprintf("/t/%s/messages/%d", b.table, id))
	require.Equal(t, 3, strings.Count(page.body, `class="status status-dead not-sent"`), "traceparent is sent")
}
