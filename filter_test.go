package outbox_test

import (
	"net/url"
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
			"aggregate_id=42", "id=7,8", "id>=100", "id<=200", "created_at>=2026-12-01T10:00:00+01:00",
			"created_at<2026-12-02", "error~time out", "payload=$.amount > 100", `header=$.tenant == "acme"`,
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
			"id>=100", "id<=200", "created_at>=2026-12-01T09:00:00Z", "created_at<2026-12-02T00:00:00Z",
			"error~time out", "payload=$.amount > 100", `header=$.tenant == "acme"`,
		}, f.Terms())

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
	})

	t.Run("BadTermsNamed", func(t *testing.T) {
		t.Parallel()
		for term, want := range map[string]string{
			"status=gone":           `filter "status=gone": unknown status "gone"`,
			"colour=red":            `filter "colour=red": unknown term`,
			"event_type=":           `filter "event_type=": no value`,
			"id>=x":                 `filter "id>=x": "x" is not a message id`,
			"id<=0":                 `filter "id<=0": "0" is not a message id`,
			"created_at>=yesterday": `filter "created_at>=yesterday": "yesterday" is not an RFC 3339 time`,
			"created_at>2026-12-01": `filter "created_at>2026-12-01": unknown term`,
			"Event_type=x":          `filter "Event_type=x": unknown term`,
			"payload":               `filter "payload": unknown term`,
		} {
			_, err := outbox.ParseFilter([]string{term})
			var fe *outbox.FilterError
			require.ErrorAs(t, err, &fe, term)
			require.Equal(t, term, fe.Term)
			require.Contains(t, err.Error(), want)
		}
		_, err := outbox.ParseFilter([]string{"event_type=A", "event_type=B"})
		require.EqualError(t, err, `filter "event_type=B": given twice`)
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
			"payload": {"$.a == 1"}, "header": {`$.t == "x"`}, "after": {"99"}, "limit": {"10"}, "event_type_x": {""},
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
	})

	t.Run("EmptyValuesIgnored", func(t *testing.T) {
		t.Parallel()
		f, err := outbox.FilterFromQuery(url.Values{"status": {""}, "event_type": {""}, "id_min": {""}})
		require.NoError(t, err)
		require.Equal(t, outbox.Filter{}, f)
	})

	t.Run("BadParameterNamed", func(t *testing.T) {
		t.Parallel()
		_, err := outbox.FilterFromQuery(url.Values{"id_min": {"ten"}})
		require.EqualError(t, err, `filter "id_min=ten": "ten" is not a message id`)
		_, err = outbox.FilterFromQuery(url.Values{"created_before": {"soon"}})
		var fe *outbox.FilterError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "created_before=soon", fe.Term)
	})
}
