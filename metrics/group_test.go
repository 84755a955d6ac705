package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/metrics"
)

// A group serves its members' series from one registry, each with its
// pipeline label; /readyz names every member that is not ready; a member
// removed and unregistered leaves no series behind.
func TestGroup(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	g := metrics.NewGroup(reg, nil)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, strings.TrimSpace(string(body))
	}
	code, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "no pipeline running", body)

	orders := metrics.New(&metrics.Options{Registerer: reg, Gatherer: reg, Table: "orders.outbox", Pipeline: "orders"})
	t1 := metrics.New(&metrics.Options{Registerer: reg, Gatherer: reg, Table: "tenant_1.outbox", Pipeline: "tenants"})
	t2 := metrics.New(&metrics.Options{Registerer: reg, Gatherer: reg, Table: "tenant_2.outbox", Pipeline: "tenants"})
	g.Add("orders", orders)
	g.Add("tenants/tenant_1.outbox", t1)
	g.Add("tenants/tenant_2.outbox", t2)
	orders.SetUp(true)
	t1.SetUp(true)
	code, body = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "orders: database refresher not started; tenants/tenant_1.outbox: database refresher not started; tenants/tenant_2.outbox: dispatcher not running", body)

	require.Equal(t, 3, testutil.CollectAndCount(reg, "outbox_dispatcher_up"))
	code, body = get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `outbox_dispatcher_up{pipeline="tenants",table="tenant_1.outbox"} 1`)
	require.Contains(t, body, `outbox_dispatcher_up{pipeline="orders",table="orders.outbox"} 1`)

	g.Remove("tenants/tenant_2.outbox")
	t2.Unregister(reg)
	require.Equal(t, 2, testutil.CollectAndCount(reg, "outbox_dispatcher_up"))
	_, body = get("/readyz")
	require.NotContains(t, body, "tenant_2")
	code, _ = get("/healthz")
	require.Equal(t, http.StatusOK, code)
}
