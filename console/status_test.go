package console_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
	"github.com/outboxd/outbox/internal/cli"
	"github.com/outboxd/outbox/internal/testdb"
)

// statusCLI runs `outboxd status --json` in process.
func statusCLI(t *testing.T, table string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(t.Context(), []string{"status", "--dsn", testdb.DSN(t), "--table", table, "--json"}, nil, &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	return out.String()
}

func TestStatusIsTheCLIsJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	c := b.client(t, bearer(testToken))

	// Nothing undelivered: every figure is fixed, so the bytes match.
	b.seed(t, 3, "OrderPaid", "done")
	b.seed(t, 2, "OrderPaid", "dead")
	r := c.get("/api/v1/status?table=" + b.table)
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Equal(t, "application/json; charset=utf-8", r.header.Get("Content-Type"))
	require.Equal(t, statusCLI(t, b.table), r.body)
	require.Equal(t, r.body, c.get("/api/v1/status").body, "the first table is the default")

	// With pending rows the age moves between the two reads; the rest is equal.
	b.seed(t, 4, "OrderPaid", "pending")
	var api, cliOut map[string]any
	require.NoError(t, json.Unmarshal([]byte(c.get("/api/v1/status").body), &api))
	require.NoError(t, json.Unmarshal([]byte(statusCLI(t, b.table)), &cliOut))
	require.InDelta(t, cliOut["oldest_pending_age_seconds"], api["oldest_pending_age_seconds"], 5)
	delete(api, "oldest_pending_age_seconds")
	delete(cliOut, "oldest_pending_age_seconds")
	require.Equal(t, cliOut, api)
	require.Equal(t, map[string]any{"pending": 4.0, "processing": 0.0, "done": 3.0, "dead": 2.0}, api["counts"])

	r = c.get("/api/v1/status?table=nope.outbox")
	require.Equal(t, http.StatusNotFound, r.code)
	require.Equal(t, "unknown_table", errorCode(t, r))
}
