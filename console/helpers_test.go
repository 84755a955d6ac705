package console_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/console"
	"github.com/outboxd/outbox/internal/testdb"
)

const testToken = "s3cret-console-token"

// testBundle is one test's table and a console serving it.
type testBundle struct {
	pool   *pgxpool.Pool
	table  string
	quoted string
	admin  *outbox.Admin
	srv    *httptest.Server
	logs   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// setup migrates a table in a schema of the test's own and serves a console
// over it; cfg's Tables and Logger are filled in.
func setup(t *testing.T, cfg console.Config) *testBundle {
	t.Helper()
	pool := testdb.Pool(t)
	schema := testdb.NewSchema(t)
	b := &testBundle{pool: pool, table: schema + ".outbox", quoted: pgx.Identifier{schema, "outbox"}.Sanitize(), logs: &syncBuffer{}}
	admin, err := outbox.NewAdmin(pool, b.table)
	require.NoError(t, err)
	require.NoError(t, admin.Migrate(t.Context()))
	b.admin = admin
	cfg.Tables = []string{b.table}
	cfg.Logger = slog.New(slog.NewTextHandler(b.logs, nil))
	srv, err := console.New(pool, &cfg)
	require.NoError(t, err)
	b.srv = httptest.NewServer(srv.Handler())
	t.Cleanup(b.srv.Close)
	return b
}

// seed enqueues n messages of eventType and sets their status.
func (b *testBundle) seed(t *testing.T, n int, eventType, status string) {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(t.Context()) //nolint:errcheck // no-op after commit
	msgs := make([]outbox.NewMessage, n)
	for i := range msgs {
		msgs[i] = outbox.NewMessage{AggregateType: "order", AggregateID: fmt.Sprint(i), EventType: eventType, Payload: map[string]int{"n": i}}
	}
	ids, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))
	if status == "pending" {
		return
	}
	q := `UPDATE {{table}} SET status = $1, attempts = 3, lease_version = 3, done_at = now(),
	      last_error = CASE WHEN $1 = 'dead' THEN 'sink: 503 upstream timeout' END WHERE id = ANY($2)`
	_, err = b.pool.Exec(t.Context(), strings.ReplaceAll(q, "{{table}}", b.quoted), status, ids)
	require.NoError(t, err)
}

// client is an HTTP client with its own cookie jar.
type client struct {
	t    *testing.T
	base string
	http *http.Client
	auth func(*http.Request)
}

func (b *testBundle) client(t *testing.T, auth func(*http.Request)) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, base: b.srv.URL, auth: auth, http: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func bearer(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

func basic(user, pass string) func(*http.Request) {
	return func(r *http.Request) { r.SetBasicAuth(user, pass) }
}

type response struct {
	code   int
	header http.Header
	body   string
}

func (c *client) do(method, path string, body any, mod ...func(*http.Request)) response {
	c.t.Helper()
	var rd io.Reader
	if s, ok := body.(string); ok {
		rd = strings.NewReader(s)
	} else if body != nil {
		b, err := json.Marshal(body)
		require.NoError(c.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, rd)
	require.NoError(c.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.auth != nil {
		c.auth(req)
	}
	for _, m := range mod {
		m(req)
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return response{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

func (c *client) get(path string) response { c.t.Helper(); return c.do(http.MethodGet, path, nil) }

// login signs in through the form and returns the session's CSRF token, read
// from the overview page as a browser would.
func (c *client) login(form url.Values) string {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), http.MethodPost, c.base+"/login", strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.base)
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	resp.Body.Close()
	require.Equal(c.t, http.StatusSeeOther, resp.StatusCode)
	return c.csrf()
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

func (c *client) csrf() string {
	c.t.Helper()
	page := c.get("/")
	require.Equal(c.t, http.StatusOK, page.code, page.body)
	m := csrfMeta.FindStringSubmatch(page.body)
	require.NotNil(c.t, m, "no CSRF token in the page")
	return m[1]
}

func errorCode(t *testing.T, r response) string {
	t.Helper()
	code, _ := errorCodeTerm(t, r)
	return code
}

// errorCodeTerm is an API error's code and, for bad_filter, its term.
func errorCodeTerm(t *testing.T, r response) (code, term string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Term, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &e), r.body)
	require.NotEmpty(t, e.Error.Message, r.body)
	return e.Error.Code, e.Error.Term
}

// exec runs q with {{table}} replaced by the quoted table name.
func (b *testBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), strings.ReplaceAll(q, "{{table}}", b.quoted), args...)
	require.NoError(t, err)
}
