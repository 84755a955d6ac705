package console

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// FuzzFilterGrammar holds the CLI (--filter NAME=VALUE, outbox.ParseFilter)
// and the API (a JSON body's filter, and a query string) to one grammar:
// for any two terms, either all three refuse them, or all three accept
// them with the same meaning; a single refused term is named alike.
func FuzzFilterGrammar(f *testing.F) {
	for _, seed := range [][4]string{
		{"status", "dead", "event_type", "OrderPaid"},
		{"status", "dead,pending", "status", "done"},
		{"id", "1,2", "id", "3"},
		{"id_min", "5", "id_max", "10"},
		{"created_after", "2026-12-01", "created_before", "2026-12-02T10:00:00+01:00"},
		{"error", "time out", "payload", "$.a > 1"},
		{"header", `$.t == "x"`, "aggregate_id", "42"},
		{"evnt_type", "X", "event_type", "A"},
		{"event-type", "Wanted", "aggregate_type", "order"},
		{"event_type", "", "status", "dead"},
		{"event_type", "A", "event_type", "B"},
		{"id_min", "0", "id", "x"},
		{"status", "gone", "created_after", "yesterday"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		if strings.Contains(n1, "=") || strings.Contains(n2, "=") {
			t.Skip("a name with '=' is not a term either side can write")
		}
		cli, cliErr := outbox.ParseFilter([]string{n1 + "=" + v1, n2 + "=" + v2})
		body := filterBody{n1: v1}
		q := url.Values{}
		q.Add(n1, v1)
		q.Add(n2, v2)
		if n1 == n2 {
			body[n1] = []any{v1, v2}
		} else {
			body[n2] = v2
		}
		api, apiErr := bodyFilter(body, "")
		query, queryErr := queryFilter(q, "")
		require.Equal(t, cliErr == nil, apiErr == nil, "cli %v, api %v", cliErr, apiErr)
		require.Equal(t, cliErr == nil, queryErr == nil, "cli %v, query %v", cliErr, queryErr)
		if cliErr == nil {
			require.Equal(t, cli.Terms(), api.Terms())
			require.Equal(t, cli.Terms(), query.Terms())
			require.True(t, cli.CreatedAfter.Equal(api.CreatedAfter) && cli.CreatedBefore.Equal(api.CreatedBefore))
			return
		}
		var ce, ae *outbox.FilterError
		require.True(t, errors.As(cliErr, &ce), "%v", cliErr)
		require.True(t, errors.As(apiErr, &ae), "%v", apiErr)
		if _, err := outbox.ParseFilter([]string{n2 + "=" + v2}); err == nil {
			require.Equal(t, ce.Term, ae.Term, "the one refused term, named alike")
		}
	})
}
