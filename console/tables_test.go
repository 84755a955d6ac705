package console_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/console"
	"github.com/outboxd/outbox/internal/testdb"
)

func TestSeveralTables(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	other := testdb.NewSchema(t) + ".billing"
	a, err := outbox.NewAdmin(b.pool, other)
	require.NoError(t, err)
	require.NoError(t, a.Migrate(t.Context()))
	b.seed(t, 2, "OrderPaid", "dead")
	srv, err := console.New(b.pool, &console.Config{Tables: []string{b.table, other}, Credentials: console.Credentials{Token: testToken}})
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	b.srv = hs
	c := b.client(t, bearer(testToken))

	tables := decode[struct {
		Tables []console.TableView `json:"tables"`
	}](t, c.get("/api/v1/tables"))
	require.Equal(t, []console.TableView{{Name: b.table}, {Name: other}}, tables.Tables)
	require.Contains(t, c.get("/api/v1/status?table="+url.QueryEscape(other)).body, `"dead": 0`)
	require.Contains(t, c.get("/api/v1/status").body, `"dead": 2`)
	require.Equal(t, console.CountView{N: 0}, decode[console.CountView](t, c.get("/api/v1/tables/"+other+"/count?status=dead")))

	pc := b.client(t, nil)
	pc.login(url.Values{"token": {testToken}})
	page := pc.get("/t/" + other + "/dead")
	require.Equal(t, http.StatusOK, page.code)
	require.Contains(t, page.body, `id="table-switch"`)
	require.Contains(t, page.body, `<option value="`+other+`" selected>`)
	require.Equal(t, http.StatusNotFound, pc.get("/t/nope.outbox/").code)
	require.True(t, strings.Contains(pc.get("/").body, `<meta name="table" content="`+b.table+`">`), "/ is the first table")

	_, err = console.New(b.pool, &console.Config{Tables: []string{b.table, b.table}, Credentials: console.Credentials{Token: testToken}})
	require.ErrorContains(t, err, "given twice")
}

// A dynamic console starts with no table, serves tables added while it
// runs (each through its own database handle) with the health its relay
// reports, stops serving those removed, and samples only the tables viewed.
func TestDynamicTables(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	other := testdb.NewSchema(t) + ".billing"
	a, err := outbox.NewAdmin(b.pool, other)
	require.NoError(t, err)
	require.NoError(t, a.Migrate(t.Context()))
	b.seed(t, 2, "OrderPaid", "dead")
	logs := &syncBuffer{}
	srv, err := console.New(nil, &console.Config{Dynamic: true, Credentials: console.Credentials{Token: testToken},
		SampleInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Health: func(table string) string {
			if table == "gone.outbox" {
				return "failed, starting again in 30s: table does not exist"
			}
			return ""
		}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-served) })
	b.srv = &httptest.Server{URL: "http://" + ln.Addr().String()}
	c := b.client(t, bearer(testToken))
	list := func() []console.TableView {
		return decode[struct {
			Tables []console.TableView `json:"tables"`
		}](t, c.get("/api/v1/tables")).Tables
	}

	require.Empty(t, list())
	none := c.get("/api/v1/status")
	require.Equal(t, http.StatusNotFound, none.code)
	require.Contains(t, none.body, "serves no table yet")

	require.NoError(t, srv.AddTable(b.table, b.pool))
	require.NoError(t, srv.AddTable(other, testdb.NewPool(t, 2)))
	require.NoError(t, srv.AddTable("gone.outbox", b.pool))
	require.ErrorContains(t, srv.AddTable(other, b.pool), "given twice")
	require.Equal(t, []console.TableView{{Name: b.table}, {Name: other},
		{Name: "gone.outbox", Health: "failed, starting again in 30s: table does not exist"}}, list())
	require.Contains(t, c.get("/api/v1/status").body, `"dead": 2`, "the first table added is the default")
	require.Contains(t, c.get("/api/v1/status?table="+url.QueryEscape(other)).body, `"dead": 0`)

	pc := b.client(t, nil)
	pc.login(url.Values{"token": {testToken}})
	page := pc.get("/t/" + other + "/dead")
	require.Equal(t, http.StatusOK, page.code)
	require.Contains(t, page.body, `class="unhealthy" title="failed, starting again in 30s: table does not exist">gone.outbox · failed`)

	// Only the tables viewed are sampled: the missing one fails its
	// samples once a request names it.
	time.Sleep(100 * time.Millisecond) // five sample intervals
	require.NotContains(t, logs.String(), "gone.outbox", "not viewed: not sampled")
	c.get("/api/v1/status?table=gone.outbox")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "sampling failed") }, 10*time.Second, 10*time.Millisecond)

	srv.RemoveTable(other)
	require.Len(t, list(), 2)
	require.Equal(t, http.StatusNotFound, pc.get("/t/"+other+"/dead").code)
}
