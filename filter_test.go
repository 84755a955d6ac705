package outbox_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

func TestParseFilter(t *testing.T) {
	t.Parallel()

	t.Run("EveryTerm", func(t *testing.T) {
		t.Parallel()
		f, err := outbox.ParseFilter([]string{
			"status=dead", "status=pending,dead", "event_type=OrderPaid", "aggregate_type=order",
			"aggregate_id=42", "id=7,8", "id_min=100", "id_max=200", "created_after=2026-12-01T10:00:00+01:00",
			"created_before=2026-12-02", "error=time out", "payload=$.amount > 100", `header=$.tenant == "acme"`,
		})
		require.NoError(t, err)
		require.Equal(t, outbox.Filter{
			Status: []string{"dead", "pending"}, EventType: "OrderPaid", AggregateType: "order", AggregateID: "42",
			IDs: []int64{7, 8}, IDMin: 100, IDMax: 200,
			CreatedAfter:  time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("", 3600)),
			CreatedBefore: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
			ErrorContains: "time out", PayloadPath: "$.amount > 100", HeaderPath: `$.tenant == "acme"`,
		}, f)
		require.Equal(t, []string{
			"status=pending,dead", "event_type=OrderPaid", "aggregate_type=order", "aggregate_id=42", "id=7,8",
			"id_min=100", "id_max=200", "created_after=2026-12-01T09:00:00Z", "created_before=2026-12-02T00:00:00Z",
			"error=time out", "payload=$.amount > 100", `header=$.tenant == "acme"`,
		}, f.Terms())
		require.False(t, f.Empty())

		again, err := outbox.ParseFilter(f.Terms())
		require.NoError(t, err)
		require.Equal(t, f.Terms(), again.Terms())
		require.True(t, f.CreatedAfter.Equal(again.CreatedAfter))
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		f, err := outbox.ParseFilter(nil)
		require.NoError(t, err)
		require.Equal(t, outbox.Filter{}, f)
		require.Empty(t, f.Terms())
		require.Empty(t, f.Query())
		require.True(t, f.Empty())
		f, err = outbox.ParseFilter([]string{"status=dead"})
		require.NoError(t, err)
		require.True(t, f.Empty(), "a status alone matches every message of it")
	})

	t.Run("BadTermsNamed", func(t *testing.T) {
		t.Parallel()
		for term, want := range map[string]struct{ name, text string }{
			"status=gone":          {"status", `filter "status": unknown status "gone"`},
			"colour=red":           {"colour", `filter "colour": unknown term (known: status, event_type,`},
			"evnt_type=X":          {"evnt_type", `unknown term (did you mean event_type?)`},
			"event-type=Wanted":    {"event-type", `unknown term (did you mean event_type?)`},
			"event_type=":          {"event_type", `filter "event_type": no value`},
			"id_min=x":             {"id_min", `filter "id_min": "x" is not a message id`},
			"id_max=0":             {"id_max", `filter "id_max": "0" is not a message id`},
			"created_after=later":  {"created_after", `"later" is not an RFC 3339 time`},
			"Event_type=x":         {"Event_type", `unknown term (did you mean event_type?)`},
			"payload":              {"payload", `"payload" is not NAME=VALUE`},
			"id>=100":              {"id>", `unknown term (did you mean id_min?)`},
			"id<=100":              {"id<", `unknown term (did you mean id_max?)`},
			"created_at<2026-12-1": {"created_at", `is not NAME=VALUE (did you mean created_before=2026-12-1?)`},
			"error~timeout":        {"error", `is not NAME=VALUE (did you mean error=timeout?)`},
		} {
			_, err := outbox.ParseFilter([]string{term})
			var fe *outbox.FilterError
			require.ErrorAs(t, err, &fe, term)
			require.Equal(t, want.name, fe.Term, term)
			require.Contains(t, err.Error(), want.text, term)
		}
		_, err := outbox.ParseFilter([]string{"event_type=A", "event_type=B"})
		require.EqualError(t, err, `filter "event_type": given twice`)
	})
}

func TestFilterQuery(t *testing.T) {
	t.Parallel()

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		q := url.Values{
			"status": {"dead", "pending,processing"}, "event_type": {"OrderPaid"}, "aggregate_type": {"order"},
			"aggregate_id": {"42"}, "id": {"3", "4"}, "id_min": {"10"}, "id_max": {"20"},
			"created_after": {"2026-12-01T00:00:00Z"}, "created_before": {"2026-12-02"}, "error": {"boom"},
			"payload": {"$.a == 1"}, "header": {`$.t == "x"`},
		}
		f, err := outbox.FilterFromQuery(q)
		require.NoError(t, err)
		require.Equal(t, []string{"dead", "pending", "processing"}, f.Status)
		require.Equal(t, []int64{3, 4}, f.IDs)
		require.Equal(t, int64(10), f.IDMin)
		require.Equal(t, "boom", f.ErrorContains)
		require.Equal(t, url.Values{
			"status": {"pending,processing,dead"}, "event_type": {"OrderPaid"}, "aggregate_type": {"order"},
			"aggregate_id": {"42"}, "id": {"3,4"}, "id_min": {"10"}, "id_max": {"20"},
			"created_after": {"2026-12-01T00:00:00Z"}, "created_before": {"2026-12-02T00:00:00Z"},
			"error": {"boom"}, "payload": {"$.a == 1"}, "header": {`$.t == "x"`},
		}, f.Query())
		back, err := outbox.FilterFromQuery(f.Query())
		require.NoError(t, err)
		require.Equal(t, f.Terms(), back.Terms())
		cli, err := outbox.ParseFilter(f.Terms())
		require.NoError(t, err)
		require.Equal(t, back, cli, "the CLI's terms and the query mean the same")
	})

	t.Run("Strict", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			q    url.Values
			term string
		}{
			{url.Values{"evnt_type": {"X"}}, "evnt_type"},
			{url.Values{"event-type": {"Wanted"}}, "event-type"},
			{url.Values{"after": {"99"}}, "after"},
			{url.Values{"event_type": {""}}, "event_type"},
			{url.Values{"status": {"dead"}, "event_type": {"A", "B"}}, "event_type"},
			{url.Values{"id_min": {"ten"}}, "id_min"},
			{url.Values{"created_before": {"soon"}}, "created_before"},
		} {
			_, err := outbox.FilterFromQuery(tc.q)
			var fe *outbox.FilterError
			require.ErrorAs(t, err, &fe, "%v", tc.q)
			require.Equal(t, tc.term, fe.Term, "%v", tc.q)
		}
	})
}

// A long id list is deduplicated in linear time: sixteen times the ids
// take about sixteen times as long, not 256 (a list of 100,000 took
// seconds of CPU per request when each id was searched for among those
// before it).
func TestParseFilterLongIDListIsLinear(t *testing.T) {
	// Not parallel: measured while the package's parallel tests wait.
	list := func(n int) string {
		ids := make([]string, 0, n+n/10)
		for i := 1; i <= n; i++ {
			ids = append(ids, strconv.Itoa(i))
		}
		for i := 1; i <= n/10; i++ {
			ids = append(ids, strconv.Itoa(i)) // repeats, dropped
		}
		return "id=" + strings.Join(ids, ",")
	}
	parse := func(term string, n int) time.Duration {
		start := time.Now()
		f, err := outbox.ParseFilter([]string{term})
		d := time.Since(start)
		require.NoError(t, err)
		require.Len(t, f.IDs, n)
		require.Equal(t, int64(n), f.IDs[n-1])
		return d
	}
	// The best of five, the sizes interleaved, so that a pause of the
	// machine (other packages' tests, the race detector, a GC) falls on
	// one run of one size, not on all of them.
	smallTerm, largeTerm := list(10_000), list(160_000)
	var small, large time.Duration
	for i := range 5 {
		s, l := parse(smallTerm, 10_000), parse(largeTerm, 160_000)
		if i == 0 || s < small {
			small = s
		}
		if i == 0 || l < large {
			large = l
		}
	}
	// Sixteen times the ids: about 16 times the time when linear, 256
	// when quadratic. The bound halfway (on a log scale, and then some)
	// leaves a loaded machine room: the ratio reached 91 under the whole
	// suite with the race detector.
	require.Less(t, large, 128*small, "160,000 ids took %s, 10,000 took %s", large, small)
}
