package metrics_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
	"github.com/outboxd/outbox/metrics"
)

// testBundle is one test's outbox table and the metrics labelled with it.
type testBundle struct {
	pool   *pgxpool.Pool
	table  string // schema.outbox
	quoted string
	admin  *outbox.Admin
	reg    *prometheus.Registry
	m      *metrics.Metrics
}

// setup migrates an outbox table in a schema of the test's own and creates
// metrics for it on a registry of their own, with sink label "test".
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testdb.Pool(t)
	schema := testdb.NewSchema(t)
	b := &testBundle{
		pool:   pool,
		table:  schema + ".outbox",
		quoted: pgx.Identifier{schema, "outbox"}.Sanitize(),
		reg:    prometheus.NewRegistry(),
	}
	admin, err := outbox.NewAdmin(pool, b.table)
	require.NoError(t, err)
	require.NoError(t, admin.Migrate(t.Context()))
	b.admin = admin
	b.m = metrics.New(&metrics.Options{Registerer: b.reg, Table: b.table, Sink: "test", Logger: quietLogger()})
	return b
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// exec runs q with {{table}} replaced by the quoted table name.
func (b *testBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), strings.ReplaceAll(q, "{{table}}", b.quoted), args...)
	require.NoError(t, err)
}

// get fetches url and returns the status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Close = true // no idle connection outlives the test (goleak)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// scrape fetches a /metrics URL and parses the exposition.
func scrape(t *testing.T, url string) []*dto.MetricFamily {
	t.Helper()
	code, body := get(t, url)
	require.Equal(t, http.StatusOK, code, body)
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	fams := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		fams = append(fams, f)
	}
	return fams
}

// gather collects the registry's families.
func gather(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	return fams
}

// flatten turns families into one value per series, keyed as in the text
// format without the table label (required on every series, with value
// table): `name{k="v",...}` with labels sorted, histograms as name_count,
// name_sum and name_bucket{le="x",...}.
func flatten(t *testing.T, fams []*dto.MetricFamily, table string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			seenTable := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" {
					require.Equal(t, table, l.GetValue(), "table label of %s", f.GetName())
					seenTable = true
					continue
				}
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			require.True(t, seenTable, "%s has no table label", f.GetName())
			key := func(name string, extra ...string) string {
				all := append(slices.Clone(labels), extra...)
				if len(all) == 0 {
					return name
				}
				slices.Sort(all)
				return name + "{" + strings.Join(all, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key(f.GetName())] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key(f.GetName())] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key(f.GetName()+"_count")] = float64(h.GetSampleCount())
				out[key(f.GetName()+"_sum")] = h.GetSampleSum()
				for _, bk := range h.GetBucket() {
					le := fmt.Sprintf("le=%q", fmt.Sprint(bk.GetUpperBound()))
					out[key(f.GetName()+"_bucket", le)] = float64(bk.GetCumulativeCount())
				}
				// A gathered histogram leaves its +Inf bucket implicit; the
				// text format spells it out.
				out[key(f.GetName()+"_bucket", `le="+Inf"`)] = float64(h.GetSampleCount())
			default:
				t.Fatalf("unexpected type %s of %s", f.GetType(), f.GetName())
			}
		}
	}
	return out
}

// requireSeries fails unless every series in want has its value in got.
func requireSeries(t *testing.T, got, want map[string]float64) {
	t.Helper()
	sub := map[string]float64{}
	for k := range want {
		v, ok := got[k]
		require.True(t, ok, "no series %s", k)
		sub[k] = v
	}
	require.Equal(t, want, sub)
}

// family returns the series of got whose name starts with prefix (a
// metric name followed by "{" or nothing).
func family(got map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range got {
		if k == name || strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}
