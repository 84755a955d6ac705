package outbox_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// fixture inserts rows of every status and kind; it returns their ids in
// insertion order. Row i: event OrderPaid when i is even, else OrderShipped;
// aggregate "a-(i%3)"; payload {"n": i}; header tenant "acme" when i%4 == 0.
// Statuses cycle pending, processing, done, dead; dead rows say "timeout".
func (b *testBundle) fixture(t *testing.T, n int) []int64 {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `INSERT INTO `+b.quoted+` (aggregate_type, aggregate_id, event_type, payload, headers,
			status, attempts, lease_owner, lease_until, lease_version, last_error, done_at, created_at)
		SELECT 'order', 'a-' || (g % 3), CASE WHEN g % 2 = 0 THEN 'OrderPaid' ELSE 'OrderShipped' END,
			jsonb_build_object('n', g), CASE WHEN g % 4 = 0 THEN '{"tenant": "acme"}'::jsonb END,
			(ARRAY['pending', 'processing', 'done', 'dead'])[g % 4 + 1], g % 4,
			CASE WHEN g % 4 = 1 THEN 'worker-' || (g % 2) END,
			CASE WHEN g % 4 = 1 THEN now() + interval '1 minute' END, g % 4,
			CASE WHEN g % 4 = 3 THEN 'HTTP 503: upstream Timeout' END,
			CASE WHEN g % 4 = 2 THEN now() END,
			timestamptz '2026-01-01 00:00:00Z' + g * interval '1 hour'
		FROM generate_series(0, $1 - 1) AS g ORDER BY g
		RETURNING id`, n)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, n)
	return ids
}

func summaryIDs(rows []outbox.MessageSummary) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func TestAdminMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ids := b.fixture(t, 40)
	// pick returns the fixture ids whose index satisfies keep, newest first.
	pick := func(keep func(i int) bool) []int64 {
		var out []int64
		for i := len(ids) - 1; i >= 0; i-- {
			if keep(i) {
				out = append(out, ids[i])
			}
		}
		return out
	}
	list := func(t *testing.T, terms ...string) []int64 {
		t.Helper()
		f, err := outbox.ParseFilter(terms)
		require.NoError(t, err)
		rows, next, err := b.admin.Messages(ctx, f, outbox.Page{Desc: true, Limit: 500})
		require.NoError(t, err)
		require.Zero(t, next)
		n, err := b.admin.Count(ctx, f, false)
		require.NoError(t, err)
		require.Equal(t, outbox.Count{N: int64(len(rows))}, n, "count agrees with the list for %v", terms)
		return summaryIDs(rows)
	}

	for name, tc := range map[string]struct {
		terms []string
		keep  func(i int) bool
	}{
		"All":           {nil, func(int) bool { return true }},
		"Dead":          {[]string{"status=dead"}, func(i int) bool { return i%4 == 3 }},
		"PendingOrDone": {[]string{"status=pending,done"}, func(i int) bool { return i%4 == 0 || i%4 == 2 }},
		"Processing":    {[]string{"status=processing"}, func(i int) bool { return i%4 == 1 }},
		"EventType":     {[]string{"event_type=OrderPaid"}, func(i int) bool { return i%2 == 0 }},
		"Aggregate":     {[]string{"aggregate_type=order", "aggregate_id=a-1"}, func(i int) bool { return i%3 == 1 }},
		"IDRange": {[]string{fmt.Sprintf("id_min=%d", ids[5]), fmt.Sprintf("id_max=%d", ids[9])},
			func(i int) bool { return i >= 5 && i <= 9 }},
		"IDs":          {[]string{fmt.Sprintf("id=%d,%d", ids[2], ids[30])}, func(i int) bool { return i == 2 || i == 30 }},
		"Created":      {[]string{"created_after=2026-01-01T10:00:00Z", "created_before=2026-01-01T20:00:00Z"}, func(i int) bool { return i >= 10 && i < 20 }},
		"ErrorText":    {[]string{"status=dead", "error=timeout"}, func(i int) bool { return i%4 == 3 }},
		"Payload":      {[]string{"payload=$.n >= 30"}, func(i int) bool { return i >= 30 }},
		"Header":       {[]string{`header=$.tenant == "acme"`}, func(i int) bool { return i%4 == 0 }},
		"NotPredicate": {[]string{"payload=$.n"}, func(int) bool { return false }},
		// Values are parameters: SQL in them is text to match, nothing more.
		"Injection": {[]string{"event_type=x' OR '1'='1", "error=%"}, func(int) bool { return false }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want := pick(tc.keep)
			if want == nil {
				want = []int64{}
			}
			require.Equal(t, want, list(t, tc.terms...))
		})
	}

	t.Run("KeysetPages", func(t *testing.T) {
		t.Parallel()
		var got []int64
		var after int64
		for {
			rows, next, err := b.admin.Messages(ctx, outbox.Filter{}, outbox.Page{After: after, Limit: 7, Desc: true})
			require.NoError(t, err)
			got = append(got, summaryIDs(rows)...)
			if next == 0 {
				break
			}
			require.Len(t, rows, 7)
			after = next
		}
		require.Equal(t, pick(func(int) bool { return true }), got)

		rows, next, err := b.admin.Messages(ctx, outbox.Filter{Status: []string{"dead"}}, outbox.Page{After: ids[10], Limit: 3})
		require.NoError(t, err)
		require.Equal(t, []int64{ids[11], ids[15], ids[19]}, summaryIDs(rows))
		require.Equal(t, ids[19], next)
	})

	t.Run("DefaultAndMaxLimit", func(t *testing.T) {
		t.Parallel()
		rows, next, err := b.admin.Messages(ctx, outbox.Filter{}, outbox.Page{Desc: true})
		require.NoError(t, err)
		require.Len(t, rows, 40)
		require.Zero(t, next)
		require.Equal(t, ids[39], rows[0].ID)
	})

	t.Run("Summary", func(t *testing.T) {
		t.Parallel()
		rows, _, err := b.admin.Messages(ctx, outbox.Filter{IDs: []int64{ids[1], ids[2], ids[3]}}, outbox.Page{})
		require.NoError(t, err)
		require.Len(t, rows, 3)
		processing, done, dead := rows[0], rows[1], rows[2]
		require.Equal(t, "processing", processing.Status)
		require.Equal(t, "worker-1", *processing.LeaseOwner)
		require.NotNil(t, processing.LeaseUntil)
		require.Nil(t, processing.DoneAt)
		require.Equal(t, "done", done.Status)
		require.NotNil(t, done.DoneAt)
		require.Nil(t, done.LeaseOwner)
		require.Equal(t, "dead", dead.Status)
		require.Equal(t, "HTTP 503: upstream Timeout", *dead.LastError)
		require.Equal(t, 3, dead.Attempts)
		require.Equal(t, "OrderShipped", dead.EventType)
		require.Equal(t, "a-0", dead.AggregateID)
		require.True(t, dead.CreatedAt.Equal(time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)))
	})

	t.Run("BadPath", func(t *testing.T) {
		t.Parallel()
		for _, f := range []outbox.Filter{{PayloadPath: "$.n >"}, {HeaderPath: "$$"}} {
			_, _, err := b.admin.Messages(ctx, f, outbox.Page{})
			var fe *outbox.FilterError
			require.ErrorAs(t, err, &fe)
			require.Contains(t, err.Error(), "jsonpath")
			_, err = b.admin.Count(ctx, f, true)
			require.ErrorAs(t, err, &fe)
		}
		_, _, err := b.admin.Messages(ctx, outbox.Filter{Status: []string{"lost"}}, outbox.Page{})
		require.EqualError(t, err, `filter "status": unknown status "lost" (want pending, processing, done or dead)`)
	})
}

func TestAdminCountCapped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.exec(t, `INSERT INTO `+b.quoted+` (aggregate_type, aggregate_id, event_type, payload, status)
		SELECT 'order', 'a', 'E', '{}', CASE WHEN g <= 10005 THEN 'done' ELSE 'dead' END FROM generate_series(1, 10010) AS g`)

	n, err := b.admin.Count(ctx, outbox.Filter{}, false)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: outbox.CountCap, Capped: true}, n)
	n, err = b.admin.Count(ctx, outbox.Filter{}, true)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: 10010}, n)
	n, err = b.admin.Count(ctx, outbox.Filter{Status: []string{"done"}}, false)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: outbox.CountCap, Capped: true}, n)
	n, err = b.admin.Count(ctx, outbox.Filter{Status: []string{"dead"}}, false)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: 5}, n)
	// Exactly the cap is not capped.
	n, err = b.admin.Count(ctx, outbox.Filter{IDMin: 11}, false)
	require.NoError(t, err)
	require.Equal(t, outbox.Count{N: outbox.CountCap}, n)
}

func TestAdminMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ids := b.enqueue(t, outbox.NewMessage{AggregateType: "order", AggregateID: "7", EventType: "OrderPaid",
		Payload: map[string]any{"amount": 12.5, "items": []int{1, 2}}, Headers: map[string]string{"traceparent": "00-abc"}})
	b.exec(t, "UPDATE "+b.quoted+` SET status = 'processing', attempts = 2, lease_version = 5, lease_owner = 'w1',
		lease_until = now() + interval '30 seconds', last_error = 'HTTP 500' WHERE id = $1`, ids[0])

	d, err := b.admin.Message(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, ids[0], d.ID)
	require.Equal(t, "processing", d.Status)
	require.Equal(t, int64(5), d.LeaseVersion)
	require.Equal(t, 2, d.Attempts)
	require.Equal(t, "w1", *d.LeaseOwner)
	require.WithinDuration(t, b.dbNow(t).Add(30*time.Second), *d.LeaseUntil, 5*time.Second)
	require.Equal(t, "HTTP 500", *d.LastError)
	require.Equal(t, map[string]string{"traceparent": "00-abc"}, d.Headers)
	require.JSONEq(t, `{"amount": 12.5, "items": [1, 2]}`, string(d.Payload))
	require.True(t, json.Valid(d.Payload))

	_, err = b.admin.Message(ctx, ids[0]+100)
	require.ErrorIs(t, err, outbox.ErrNotFound)
	require.Contains(t, err.Error(), fmt.Sprint(ids[0]+100))
}
