package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
)

func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}, RequestTimeout: 250 * time.Millisecond})
	c := b.client(t, bearer(testToken))
	b.seed(t, 3, "OrderPaid", "dead")

	// A transaction holding the table's strongest lock makes every read wait
	// for as long as it is held: only the deadline ends the requests.
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "LOCK TABLE "+b.quoted+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	for _, path := range []string{"/api/v1/status", "/api/v1/tables/" + b.table + "/messages?status=dead"} {
		r := c.get(path)
		require.Equal(t, http.StatusGatewayTimeout, r.code, path+": "+r.body)
		require.Equal(t, "timeout", errorCode(t, r), r.body)
		require.Contains(t, r.body, "did not answer within 250ms", r.body)
	}
	page := c.get("/t/" + b.table + "/messages?status=dead")
	require.Equal(t, http.StatusGatewayTimeout, page.code, page.body)
	require.Contains(t, page.body, "did not answer within 250ms")
	require.True(t, strings.HasPrefix(page.header.Get("Content-Type"), "text/html"))
	require.Contains(t, b.logs.String(), "console: request timed out")

	// The cancelled statements left nothing behind: once the lock is gone the
	// same requests answer.
	require.NoError(t, tx.Rollback(t.Context()))
	r := c.get("/api/v1/tables/" + b.table + "/messages?status=dead")
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Equal(t, http.StatusOK, c.get("/api/v1/status").code)
}
