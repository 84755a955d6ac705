package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
)

type messagesBody struct {
	Messages []console.MessageView `json:"messages"`
	Next     *int64                `json:"next_after"`
}

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	require.Equal(t, http.StatusOK, r.code, r.body)
	var v T
	require.NoError(t, json.Unmarshal([]byte(r.body), &v), r.body)
	return v
}

func TestMessagesAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	b.seed(t, 7, "OrderPaid", "done")
	b.seed(t, 5, "PaymentFailed", "dead")
	b.seed(t, 3, "OrderShipped", "pending")
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table

	t.Run("FilterAndKeysetPages", func(t *testing.T) {
		t.Parallel()
		var ids []int64
		path := api + "/messages?status=dead,done&limit=4"
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10)
			body := decode[messagesBody](t, c.get(path))
			for _, m := range body.Messages {
				require.Contains(t, []string{"dead", "done"}, m.Status)
				ids = append(ids, m.ID)
			}
			if body.Next == nil {
				break
			}
			path = fmt.Sprintf("%s/messages?status=dead,done&limit=4&after=%d", api, *body.Next)
		}
		require.Len(t, ids, 12)
		require.IsDecreasing(t, ids, "newest first")
		asc := decode[messagesBody](t, c.get(api+"/messages?order=asc&event_type=PaymentFailed"))
		require.Len(t, asc.Messages, 5)
		require.Less(t, asc.Messages[0].ID, asc.Messages[4].ID)
		require.Equal(t, "sink: 503 upstream timeout", *asc.Messages[0].LastError)
	})
	t.Run("Count", func(t *testing.T) {
		t.Parallel()
		got := decode[console.CountView](t, c.get(api+"/count?status=dead&error=TIMEOUT"))
		require.Equal(t, console.CountView{N: 5}, got)
		got = decode[console.CountView](t, c.get(api+"/count?exact=1"))
		require.Equal(t, console.CountView{N: 15}, got)
	})
	t.Run("Detail", func(t *testing.T) {
		t.Parallel()
		list := decode[messagesBody](t, c.get(api+"/messages?status=dead&limit=1"))
		id := list.Messages[0].ID
		d := decode[console.MessageDetailView](t, c.get(fmt.Sprintf("%s/messages/%d", api, id)))
		require.Equal(t, id, d.ID)
		require.Equal(t, int64(3), d.LeaseVersion)
		require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, d.AggregateID[0]-'0'), string(d.Payload))
		r := c.get(api + "/messages/999999")
		require.Equal(t, http.StatusNotFound, r.code)
		require.Equal(t, "not_found", errorCode(t, r))
	})
	t.Run("BadInputIs400", func(t *testing.T) {
		t.Parallel()
		for q, term := range map[string]string{
			"status=lost": "status", "id_min=abc": "id_min", "created_after=yesterday": "created_after",
			"payload=" + url.QueryEscape("$.a >>> 1"): "payload", "evnt_type=X": "evnt_type",
			"event-type=Wanted": "event-type", "event_type=": "event_type", "exact=1": "exact",
			// The server refuses these, but they are the client's.
			"payload=" + url.QueryEscape(`$.a like_regex "("`):    "payload",
			"header=" + url.QueryEscape(`$.t like_regex "[z-a]"`): "header",
			"event_type=a%00b": "event_type", "aggregate_id=%FF%FE": "aggregate_id", "error=x%00": "error",
		} {
			for _, path := range []string{"/messages?", "/count?"} {
				if path == "/count?" && q == "exact=1" {
					continue // count's own parameter
				}
				r := c.get(api + path + q)
				require.Equal(t, http.StatusBadRequest, r.code, q+": "+r.body)
				code, got := errorCodeTerm(t, r)
				require.Equal(t, "bad_filter", code, q)
				require.Equal(t, term, got, q)
			}
		}
		for _, q := range []string{"limit=0", "limit=501", "order=sideways", "after=-1"} {
			r := c.get(api + "/messages?" + q)
			require.Equal(t, http.StatusBadRequest, r.code, q+": "+r.body)
			require.Equal(t, "bad_request", errorCode(t, r), q)
		}
		r := c.get(api + "/messages/abc")
		require.Equal(t, http.StatusBadRequest, r.code)
	})
	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		pc := b.client(t, nil)
		pc.login(url.Values{"token": {testToken}})
		for _, p := range []string{"/", "/messages?status=dead", "/dead?event_type=PaymentFailed", "/replay", "/messages?status=lost"} {
			r := pc.get("/t/" + b.table + p)
			want := http.StatusOK
			if p == "/messages?status=lost" {
				want = http.StatusBadRequest
			}
			require.Equal(t, want, r.code, p+": "+r.body)
		}
		dead := pc.get("/t/" + b.table + "/dead?event_type=PaymentFailed").body
		require.Contains(t, dead, `data-n="5"`)
		require.Contains(t, dead, `value="PaymentFailed"`, "the form keeps the filter")
	})
}

func TestCountIsCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, done_at, last_error)
	           SELECT 'order', g::text, 'PaymentFailed', '{}', 'dead', now(), 'boom' FROM generate_series(1, 10001) AS g`)
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table
	require.Equal(t, console.CountView{N: 10000, Capped: true}, decode[console.CountView](t, c.get(api+"/count?status=dead")))
	require.Equal(t, console.CountView{N: 10001}, decode[console.CountView](t, c.get(api+"/count?status=dead&exact=1")))
	pc := b.client(t, nil)
	pc.login(url.Values{"token": {testToken}})
	page := pc.get("/t/" + b.table + "/dead").body
	require.Contains(t, page, ">10,000+</span>")
	require.Contains(t, page, `id="exact-count"`)
	exact := pc.get("/t/" + b.table + "/dead?exact=1").body
	require.Contains(t, exact, ">10,001</span>")
	require.NotContains(t, exact, `id="exact-count"`)
}

// TestSearchWindowAPI: a filter no index serves reads a bounded window per
// request; the API says how far it searched and next_after goes on, and the
// pages offer to search further.
func TestSearchWindowAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}, SearchWindow: 40, Write: true})
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, done_at, last_error)
	           SELECT 'order', g::text, 'OrderPaid', '{}', CASE WHEN g % 2 = 0 THEN 'dead' ELSE 'done' END, now(),
	                  CASE WHEN g IN (5, 130) THEN 'disk full' ELSE 'boom' END
	           FROM generate_series(1, 150) AS g`)
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table
	type searchBody struct {
		messagesBody
		Partial  bool  `json:"partial"`
		Searched int64 `json:"searched"`
	}
	var found []string
	path := api + "/messages?error=disk"
	for calls := 1; ; calls++ {
		require.LessOrEqual(t, calls, 4, "150 rows in windows of 40")
		body := decode[searchBody](t, c.get(path))
		require.LessOrEqual(t, body.Searched, int64(40))
		for _, m := range body.Messages {
			found = append(found, m.AggregateID)
		}
		if calls < 4 {
			require.True(t, body.Partial, "call %d", calls)
			require.Equal(t, int64(40), body.Searched, "call %d", calls)
		}
		if body.Next == nil {
			require.False(t, body.Partial)
			break
		}
		path = fmt.Sprintf("%s/messages?error=disk&after=%d", api, *body.Next)
	}
	require.Equal(t, []string{"130", "5"}, found)

	require.Equal(t, console.CountView{N: 1, Capped: true, Partial: true, Searched: 40},
		decode[console.CountView](t, c.get(api+"/count?error=disk")))
	// Exact on request finishes in time on a small table.
	require.Equal(t, console.CountView{N: 2}, decode[console.CountView](t, c.get(api+"/count?error=disk&exact=1")))
	// The dead index drives a dead-only search, in a tenth of the window:
	// the newest 4 dead rows do not say "disk".
	require.Equal(t, console.CountView{Capped: true, Partial: true, Searched: 4},
		decode[console.CountView](t, c.get(api+"/count?status=dead&error=disk")))

	pc := b.client(t, nil)
	pc.login(url.Values{"token": {testToken}})
	page := pc.get("/t/" + b.table + "/messages?error=disk").body
	require.Contains(t, page, `id="search-partial"`)
	require.Contains(t, page, "Searched 40 messages, 1 found.")
	require.Contains(t, page, `id="search-further"`)
	require.Contains(t, page, `in the newest 40`)
	require.NotContains(t, page, `id="next-page"`)
	further := pc.get("/t/" + b.table + "/messages?error=disk&after=111").body
	require.Contains(t, further, "Searched 40 messages past id 111, 0 found.", "ids 71 to 110")
	dead := pc.get("/t/" + b.table + "/dead?error=disk").body
	require.Contains(t, dead, `id="search-further"`)
	require.Contains(t, dead, `data-n="0"`, "none among the newest 4 dead")
	require.Contains(t, dead, `id="retry-all" >`, "enabled: matches may lie past the window")
	none := pc.get("/t/" + b.table + "/dead?error=nowhere&id_max=6").body // 3 dead rows, all read
	require.Contains(t, none, `id="retry-all" disabled>`)
}

// TestExactCountTimesOut: an exact count that cannot finish within
// ExactCountTimeout answers the bounded count, marked, in time.
func TestExactCountTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}, ExactCountTimeout: time.Millisecond})
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, done_at)
	           SELECT 'order', g::text, 'OrderPaid', jsonb_build_object('n', g), 'done', now() FROM generate_series(1, 300000) AS g`)
	c := b.client(t, bearer(testToken))
	api := "/api/v1/tables/" + b.table
	got := decode[console.CountView](t, c.get(api+"/count?status=done&exact=1"))
	require.Equal(t, console.CountView{N: 10000, Capped: true, ExactTimedOut: true}, got)
	pc := b.client(t, nil)
	pc.login(url.Values{"token": {testToken}})
	page := pc.get("/t/" + b.table + "/messages?status=done&exact=1").body
	require.Contains(t, page, `id="exact-timed-out"`)
}
