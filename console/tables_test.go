package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

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
