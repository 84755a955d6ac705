package console_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
)

func TestSignInRateLimit(t *testing.T) {
	t.Parallel()
	// A refill far longer than the test: the bucket cannot refill meanwhile.
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}, SignInBurst: 3, SignInRefill: time.Hour})
	c := b.client(t, nil)
	form := func(body string) response {
		return c.do(http.MethodPost, "/login", body, func(r *http.Request) {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		})
	}
	for range 3 {
		r := form("token=guess")
		require.Equal(t, http.StatusUnauthorized, r.code, r.body)
	}
	// The burst is spent: even the right token waits, and says how long.
	r := form("token=" + testToken)
	require.Equal(t, http.StatusTooManyRequests, r.code, r.body)
	require.Contains(t, r.body, "Too many sign-in attempts")
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, r.header.Get("Retry-After"))
	require.Greater(t, secs, 3000)
	require.LessOrEqual(t, secs, 3600)
	require.NotContains(t, b.logs.String(), testToken)
	require.Contains(t, b.logs.String(), "console: sign-in rate limited")

	// The bearer token on the API is not the form: it still answers.
	require.Equal(t, http.StatusOK, b.client(t, bearer(testToken)).get("/api/v1/status").code)
}

// Guessing the API's bearer token or basic auth is bounded per address as
// the sign-in form is; a right credential spends nothing.
func TestAPIAuthRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}, SignInBurst: 3, SignInRefill: time.Hour})
	good := b.client(t, bearer(testToken))
	for range 10 {
		require.Equal(t, http.StatusOK, good.get("/api/v1/status").code, "a right token is never limited")
	}
	for _, auth := range []func(*http.Request){bearer("guess-1"), basic("admin", "guess-2"), bearer("guess-3")} {
		r := b.client(t, auth).get("/api/v1/status")
		require.Equal(t, http.StatusUnauthorized, r.code, r.body)
	}
	// The bucket is spent: a further guess is not even checked, and the
	// right token from this address waits too, told how long.
	for _, c := range []*client{b.client(t, bearer("guess-4")), good} {
		r := c.get("/api/v1/status")
		require.Equal(t, http.StatusTooManyRequests, r.code, r.body)
		require.Contains(t, r.body, `"rate_limited"`)
		secs, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err, r.header.Get("Retry-After"))
		require.Greater(t, secs, 3000)
		require.LessOrEqual(t, secs, 3600)
	}
	require.Equal(t, http.StatusTooManyRequests, b.client(t, bearer("guess-5")).get("/").code, "pages are limited alike")
	require.Contains(t, b.logs.String(), "console: authentication rate limited")
	require.NotContains(t, b.logs.String(), "guess-")
	require.NotContains(t, b.logs.String(), testToken)
}
