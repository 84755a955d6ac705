// Package deploy_test checks the deployment artefacts under deploy/ and the
// deployment docs: that they parse, that they only read metrics the metrics
// package exports, and that the configuration they show is one outboxd
// accepts. External validators (promtool, systemd-analyze) run when they
// are installed; set OUTBOX_REQUIRE_TOOLS=1 to make their absence a failure.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outbox/internal/cli"
	"github.com/outboxd/outbox/internal/testdb"
	"github.com/outboxd/outbox/metrics"
)

const (
	alertsPath     = "prometheus/alerts.yml"
	dashboardPath  = "grafana/outboxd-dashboard.json"
	unitPath       = "systemd/outboxd.service"
	envExamplePath = "systemd/outboxd.env.example"
	deploymentDoc  = "../docs/deployment.md"
	operationsDoc  = "../docs/operations.md"

	// binaryPath is where the unit and the docs install outboxd.
	binaryPath = "/usr/local/bin/outboxd"
	// configPath is where the unit reads the YAML file from; the docs show
	// its content in a yaml block whose first line is "# " + configPath.
	configPath = "/etc/outboxd/outboxd.yaml"
)

// wantAlerts are the alerts the runbooks and the docs describe.
var wantAlerts = []string{
	"OutboxOldestPendingTooOld",
	"OutboxDeadMessages",
	"OutboxExpiredLeasesRising",
	"OutboxLostLeases",
	"OutboxDispatcherDown",
	"OutboxNoDispatcher",
	"OutboxGaugesStale",
}

// requireTool returns the path of an external validator, or "" after
// logging that it is missing (a failure when OUTBOX_REQUIRE_TOOLS is set,
// as CI does where it installs them).
func requireTool(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("OUTBOX_REQUIRE_TOOLS") != "" {
		require.FailNowf(t, "tool missing", "%s not found on PATH and OUTBOX_REQUIRE_TOOLS is set (install: %s)", name, install)
	}
	t.Logf("%s not found on PATH: its checks did not run, only the Go-side ones (install: %s)", name, install)
	return ""
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// --- Prometheus alert rules -------------------------------------------------

type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name  string `yaml:"name"`
	Rules []rule `yaml:"rules"`
}

type rule struct {
	Alert         string            `yaml:"alert,omitempty"`
	Record        string            `yaml:"record,omitempty"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for,omitempty"`
	KeepFiringFor string            `yaml:"keep_firing_for,omitempty"`
	Labels        map[string]string `yaml:"labels,omitempty"`
	Annotations   map[string]string `yaml:"annotations,omitempty"`
}

func loadAlerts(t *testing.T) ruleFile {
	t.Helper()
	var rf ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, alertsPath)))
	dec.KnownFields(true) // a misspelt key ("annotation:") is an error, not a silently empty field
	require.NoError(t, dec.Decode(&rf))
	return rf
}

func alertRule(t *testing.T, rf ruleFile, name string) rule {
	t.Helper()
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == name {
				return r
			}
		}
	}
	require.FailNowf(t, "alert missing", "no alert %s", name)
	return rule{}
}

var promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

// sloThreshold is the figure OutboxOldestPendingTooOld compares the oldest
// pending age with; the dashboard draws the same line.
func sloThreshold(t *testing.T, rf ruleFile) float64 {
	t.Helper()
	m := regexp.MustCompile(`outbox_oldest_pending_age_seconds\)\s*>\s*([0-9.]+)`).
		FindStringSubmatch(alertRule(t, rf, "OutboxOldestPendingTooOld").Expr)
	require.Len(t, m, 2, "OutboxOldestPendingTooOld compares the age with a number")
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// scrapeJob is the job label the alert rules expect Prometheus to give the
// outboxd targets.
func scrapeJob(t *testing.T, rf ruleFile) string {
	t.Helper()
	s, err := scanPromQL(alertRule(t, rf, "OutboxDispatcherDown").Expr)
	require.NoError(t, err)
	job := ""
	for _, sel := range s.selectors {
		for _, m := range sel.matchers {
			if m.label == "job" {
				require.True(t, job == "" || job == m.value, "one job name throughout")
				job = m.value
			}
		}
	}
	require.NotEmpty(t, job, "OutboxDispatcherDown names the scrape job")
	return job
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	rf := loadAlerts(t)

	t.Run("Shape", func(t *testing.T) {
		t.Parallel()
		require.Len(t, rf.Groups, 1)
		require.Equal(t, "outboxd", rf.Groups[0].Name)
		anchors := markdownAnchors(t, operationsDoc)
		var names []string
		for _, r := range rf.Groups[0].Rules {
			names = append(names, r.Alert)
			require.NotEmpty(t, r.Alert, "every rule is an alert: %+v", r)
			require.Empty(t, r.Record, r.Alert)
			require.NotEmpty(t, strings.TrimSpace(r.Expr), r.Alert)
			require.Regexp(t, promDuration, r.For, "%s: for", r.Alert)
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], "%s: labels.severity", r.Alert)
			require.NotEmpty(t, strings.TrimSpace(r.Annotations["summary"]), "%s: annotations.summary", r.Alert)
			require.NotEmpty(t, strings.TrimSpace(r.Annotations["description"]), "%s: annotations.description", r.Alert)
			anchor := strings.ToLower(r.Alert)
			require.Equal(t, "docs/operations.md#"+anchor, r.Annotations["runbook_url"], r.Alert)
			require.Contains(t, anchors, anchor, "%s: its runbook section exists in %s", r.Alert, operationsDoc)
		}
		require.ElementsMatch(t, wantAlerts, names)
		require.Equal(t, "5m", alertRule(t, rf, "OutboxOldestPendingTooOld").For)
		require.Equal(t, "critical", alertRule(t, rf, "OutboxOldestPendingTooOld").Labels["severity"])
		require.InDelta(t, 300, sloThreshold(t, rf), 0)
	})

	t.Run("ContractMetrics", func(t *testing.T) {
		t.Parallel()
		for _, r := range rf.Groups[0].Rules {
			require.Empty(t, contractProblems(r.Expr), "%s: %s", r.Alert, r.Expr)
		}
		// The brief of each alert, as metric names it must read.
		for alert, want := range map[string][]string{
			"OutboxOldestPendingTooOld": {"outbox_oldest_pending_age_seconds"},
			"OutboxDeadMessages":        {"outbox_messages", "outbox_publishes_total"},
			"OutboxExpiredLeasesRising": {"outbox_expired_leases"},
			"OutboxLostLeases":          {"outbox_fenced_finalizes_total", "outbox_heartbeat_lost_leases_total"},
			"OutboxDispatcherDown":      {"outbox_dispatcher_up", "up"},
			"OutboxNoDispatcher":        {"outbox_live_dispatchers"},
			"OutboxGaugesStale":         {"outbox_db_refresh_timestamp_seconds"},
		} {
			got := metricNames(t, alertRule(t, rf, alert).Expr)
			for _, name := range want {
				require.Contains(t, got, name, alert)
			}
		}
	})

	t.Run("Promtool", func(t *testing.T) {
		t.Parallel()
		promtool := requireTool(t, "promtool", "apt-get install prometheus")
		if promtool == "" {
			return
		}
		out, err := exec.Command(promtool, "check", "rules", alertsPath).CombinedOutput()
		require.NoError(t, err, "promtool check rules:\n%s", out)

		// Unit tests of each alert's logic. promtool compares annotations
		// too; they are prose checked above, so the tests run on a copy
		// without them.
		dir := t.TempDir()
		var raw map[string]any
		require.NoError(t, yaml.Unmarshal(readFile(t, alertsPath), &raw))
		for _, g := range raw["groups"].([]any) {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				delete(r.(map[string]any), "annotations")
			}
		}
		stripped, err := yaml.Marshal(raw)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yml"), stripped, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tests.yml"), []byte(alertUnitTests), 0o600))
		cmd := exec.Command(promtool, "test", "rules", "tests.yml")
		cmd.Dir = dir
		out, err = cmd.CombinedOutput()
		require.NoError(t, err, "promtool test rules:\n%s", out)
	})
}

// alertUnitTests are promtool rule unit tests: series in, alerts out.
const alertUnitTests = `
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - name: oldest pending age over the SLO raises one alert for two replicas
    interval: 1m
    input_series:
      - series: 'outbox_oldest_pending_age_seconds{table="outbox",instance="a:9090",job="outboxd"}'
        values: '0+60x20'
      - series: 'outbox_oldest_pending_age_seconds{table="outbox",instance="b:9090",job="outboxd"}'
        values: '0+60x20'
    alert_rule_test:
      - {eval_time: 10m, alertname: OutboxOldestPendingTooOld, exp_alerts: []}
      - eval_time: 12m
        alertname: OutboxOldestPendingTooOld
        exp_alerts:
          - exp_labels: {severity: critical, table: outbox}
  - name: a dead row seen by the gauge only (reaped after a crash)
    interval: 1m
    input_series:
      - series: 'outbox_messages{status="dead",table="outbox",instance="a:9090",job="outboxd"}'
        values: '2x5 3x15'
      - series: 'outbox_db_refresh_timestamp_seconds{table="outbox",instance="a:9090",job="outboxd"}'
        values: '1x20'
    alert_rule_test:
      - {eval_time: 4m, alertname: OutboxDeadMessages, exp_alerts: []}
      - eval_time: 10m
        alertname: OutboxDeadMessages
        exp_alerts:
          - exp_labels: {severity: warning, table: outbox}
      - {eval_time: 17m, alertname: OutboxDeadMessages, exp_alerts: []}
  - name: a replica reads 0 dead until its first refresh, which is no new dead row
    interval: 1m
    input_series:
      - series: 'outbox_messages{status="dead",table="outbox",instance="a:9090",job="outboxd"}'
        values: '2x5 0 2x15'
      - series: 'outbox_db_refresh_timestamp_seconds{table="outbox",instance="a:9090",job="outboxd"}'
        values: '1x5 0 1x15'
    alert_rule_test:
      - {eval_time: 16m, alertname: OutboxDeadMessages, exp_alerts: []}
  - name: a dead outcome counted by the dispatcher
    interval: 1m
    input_series:
      - series: 'outbox_publishes_total{outcome="dead",sink="default",table="outbox",instance="a:9090",job="outboxd"}'
        values: '0x5 1x15'
      - series: 'outbox_publishes_total{outcome="done",sink="default",table="outbox",instance="a:9090",job="outboxd"}'
        values: '0+10x20'
    alert_rule_test:
      - {eval_time: 4m, alertname: OutboxDeadMessages, exp_alerts: []}
      - eval_time: 10m
        alertname: OutboxDeadMessages
        exp_alerts:
          - exp_labels: {severity: warning, table: outbox}
  - name: expired leases that keep rising, next to a flat count that does not alert
    interval: 1m
    input_series:
      - series: 'outbox_expired_leases{table="outbox",instance="a:9090",job="outboxd"}'
        values: '0x5 1+1x40'
      - series: 'outbox_expired_leases{table="other",instance="a:9090",job="outboxd"}'
        values: '3x45'
      - series: 'outbox_db_refresh_timestamp_seconds{table="outbox",instance="a:9090",job="outboxd"}'
        values: '1x45'
      - series: 'outbox_db_refresh_timestamp_seconds{table="other",instance="a:9090",job="outboxd"}'
        values: '1x45'
    alert_rule_test:
      - {eval_time: 15m, alertname: OutboxExpiredLeasesRising, exp_alerts: []}
      - eval_time: 35m
        alertname: OutboxExpiredLeasesRising
        exp_alerts:
          - exp_labels: {severity: warning, table: outbox}
  - name: leases lost at a heartbeat or at finalize, each counted without the other
    interval: 1m
    input_series:
      - series: 'outbox_heartbeat_lost_leases_total{table="outbox",instance="a:9090",job="outboxd"}'
        values: '0x5 1+1x10'
      - series: 'outbox_fenced_finalizes_total{table="other",instance="a:9090",job="outboxd"}'
        values: '0+1x15'
      - series: 'outbox_fenced_finalizes_total{table="quiet",instance="a:9090",job="outboxd"}'
        values: '4x15'
    alert_rule_test:
      - eval_time: 10m
        alertname: OutboxLostLeases
        exp_alerts:
          - exp_labels: {severity: warning, table: outbox}
          - exp_labels: {severity: warning, table: other}
  - name: one replica unreachable, one dispatcher stopped
    interval: 1m
    input_series:
      - series: 'up{instance="a:9090",job="outboxd"}'
        values: '1x5 0x10'
      - series: 'up{instance="b:9090",job="outboxd"}'
        values: '1x15'
      - series: 'up{instance="c:9090",job="outboxd"}'
        values: '1x15'
      - series: 'outbox_dispatcher_up{table="outbox",instance="b:9090",job="outboxd"}'
        values: '1x15'
      - series: 'outbox_dispatcher_up{table="outbox",instance="c:9090",job="outboxd"}'
        values: '1x5 0x10'
    alert_rule_test:
      - {eval_time: 8m, alertname: OutboxDispatcherDown, exp_alerts: []}
      - eval_time: 12m
        alertname: OutboxDispatcherDown
        exp_alerts:
          - exp_labels: {severity: warning, instance: "a:9090", job: outboxd}
          - exp_labels: {severity: warning, instance: "c:9090", job: outboxd, table: outbox}
  - name: no replica reports at all
    interval: 1m
    input_series:
      - series: 'up{instance="x:9100",job="node"}'
        values: '1x10'
    alert_rule_test:
      - eval_time: 6m
        alertname: OutboxDispatcherDown
        exp_alerts:
          - exp_labels: {severity: warning, job: outboxd}
  - name: the last dispatcher of a table stops, seen by two replicas' gauges
    interval: 1m
    input_series:
      - series: 'outbox_live_dispatchers{table="outbox",instance="a:9090",job="outboxd"}'
        values: '2x5 0x10'
      - series: 'outbox_live_dispatchers{table="outbox",instance="b:9090",job="outboxd"}'
        values: '2x5 0x10'
      - series: 'outbox_live_dispatchers{table="other",instance="a:9090",job="outboxd"}'
        values: '1x15'
    alert_rule_test:
      - {eval_time: 6m, alertname: OutboxNoDispatcher, exp_alerts: []}
      - eval_time: 9m
        alertname: OutboxNoDispatcher
        exp_alerts:
          - exp_labels: {severity: critical, table: outbox}
  - name: gauges that stop refreshing
    interval: 1m
    input_series:
      - series: 'outbox_db_refresh_timestamp_seconds{table="outbox",instance="a:9090",job="outboxd"}'
        values: '0+60x10 600x10'
    alert_rule_test:
      - {eval_time: 12m, alertname: OutboxGaugesStale, exp_alerts: []}
      - eval_time: 16m
        alertname: OutboxGaugesStale
        exp_alerts:
          - exp_labels: {severity: warning, table: outbox, instance: "a:9090", job: outboxd}
`

// TestContractMatchesMetricsPackage checks the contract hard-coded in these
// tests against what the metrics package registers: the same names, kinds
// and labels (Prometheus adds job and instance at scrape time).
func TestContractMatchesMetricsPackage(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics.New(&metrics.Options{Registerer: reg, Table: "app.outbox"})
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]metricSpec{}
	for _, f := range families {
		kind := map[string]metricKind{"GAUGE": gauge, "COUNTER": counter, "HISTOGRAM": histogram}[f.GetType().String()]
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" {
					require.Equal(t, "app.outbox", l.GetValue(), f.GetName())
				}
			}
		}
		slices.Sort(labels)
		got[f.GetName()] = metricSpec{kind: kind, labels: labels}
	}
	want := map[string]metricSpec{}
	for name, spec := range contract {
		labels := slices.Clone(spec.labels)
		slices.Sort(labels)
		want[name] = metricSpec{kind: spec.kind, labels: labels}
	}
	require.Equal(t, want, got)
}

// --- Grafana dashboard ------------------------------------------------------

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasourceRef  `json:"datasource"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *datasourceRef `json:"datasource"`
	GridPos     struct {
		X, Y, W, H int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit       string `json:"unit"`
			Thresholds struct {
				Steps []struct {
					Color string   `json:"color"`
					Value *float64 `json:"value"`
				} `json:"steps"`
			} `json:"thresholds"`
			Custom struct {
				ThresholdsStyle struct {
					Mode string `json:"mode"`
				} `json:"thresholdsStyle"`
			} `json:"custom"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // inside a collapsed row
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	require.NoError(t, json.Unmarshal(readFile(t, dashboardPath), &d))
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	panels := allPanels(d.Panels)

	t.Run("Shape", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "outboxd", d.UID)
		require.NotEmpty(t, d.Title)
		require.GreaterOrEqual(t, d.SchemaVersion, 36, "datasource references by uid need schemaVersion 36+")
		vars := map[string]int{}
		for i, v := range d.Templating.List {
			vars[v.Name] = i
		}
		require.Contains(t, vars, "datasource")
		ds := d.Templating.List[vars["datasource"]]
		require.Equal(t, "datasource", ds.Type)
		require.JSONEq(t, `"prometheus"`, string(ds.Query))

		require.Contains(t, vars, "table")
		table := d.Templating.List[vars["table"]]
		require.Equal(t, "query", table.Type)
		require.Equal(t, "label_values(outbox_messages, table)", table.Definition)
		var q struct {
			Query string `json:"query"`
		}
		require.NoError(t, json.Unmarshal(table.Query, &q))
		require.Equal(t, table.Definition, q.Query)
		require.Equal(t, &datasourceRef{Type: "prometheus", UID: "${datasource}"}, table.Datasource)
		require.True(t, table.Multi && table.IncludeAll, "the table variable selects one table or all")

		ids := map[int]bool{}
		for _, p := range panels {
			require.NotZero(t, p.ID, p.Title)
			require.False(t, ids[p.ID], "panel id %d is used twice", p.ID)
			ids[p.ID] = true
			require.NotEmpty(t, p.Title)
			if p.Type == "row" {
				continue
			}
			require.Equal(t, &datasourceRef{Type: "prometheus", UID: "${datasource}"}, p.Datasource, p.Title)
			require.NotEmpty(t, p.Targets, p.Title)
			require.Positive(t, p.GridPos.W, p.Title)
			require.Positive(t, p.GridPos.H, p.Title)
			require.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, "%s is wider than the grid", p.Title)
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.RefID, p.Title)
				require.False(t, refs[tg.RefID], "%s: refId %s twice", p.Title, tg.RefID)
				refs[tg.RefID] = true
				require.Equal(t, &datasourceRef{Type: "prometheus", UID: "${datasource}"}, tg.Datasource, p.Title)
			}
		}
		for i, a := range panels {
			for _, b := range panels[i+1:] {
				overlap := a.GridPos.X < b.GridPos.X+b.GridPos.W && b.GridPos.X < a.GridPos.X+a.GridPos.W &&
					a.GridPos.Y < b.GridPos.Y+b.GridPos.H && b.GridPos.Y < a.GridPos.Y+a.GridPos.H
				require.False(t, overlap, "panels %q and %q overlap", a.Title, b.Title)
			}
		}
	})

	t.Run("ContractMetrics", func(t *testing.T) {
		t.Parallel()
		for _, p := range panels {
			for _, tg := range p.Targets {
				require.Empty(t, contractProblems(tg.Expr), "%s/%s: %s", p.Title, tg.RefID, tg.Expr)
				s, err := scanPromQL(tg.Expr)
				require.NoError(t, err)
				for _, sel := range s.selectors {
					require.Contains(t, sel.matchers, matcher{label: "table", op: "=~", value: "$table"},
						"%s/%s: %s follows the table variable", p.Title, tg.RefID, sel.name)
				}
			}
		}
	})

	t.Run("Panels", func(t *testing.T) {
		t.Parallel()
		// What the dashboard is for, as metrics that some panel must chart.
		charted := map[string]bool{}
		for _, p := range panels {
			for _, tg := range p.Targets {
				for _, name := range metricNames(t, tg.Expr) {
					charted[name] = true
				}
			}
		}
		for _, name := range []string{
			"outbox_oldest_pending_age_seconds", "outbox_messages", "outbox_publishes_total",
			"outbox_delivery_lag_seconds_bucket", "outbox_publish_duration_seconds_bucket",
			"outbox_claim_batch_size_bucket", "outbox_claim_duration_seconds_bucket",
			"outbox_fenced_finalizes_total", "outbox_heartbeat_lost_leases_total",
			"outbox_expired_leases", "outbox_dispatcher_up",
		} {
			require.True(t, charted[name], "no panel charts %s", name)
		}

		// Delivery lag in three quantiles.
		var lag []string
		for _, p := range panels {
			for _, tg := range p.Targets {
				if strings.Contains(tg.Expr, "outbox_delivery_lag_seconds_bucket") {
					lag = append(lag, regexp.MustCompile(`histogram_quantile\(([0-9.]+),`).FindStringSubmatch(tg.Expr)[1])
				}
			}
		}
		require.ElementsMatch(t, []string{"0.5", "0.9", "0.99"}, lag)

		// Every panel of the oldest pending age turns red at the alert's
		// SLO, and the time series draws it as a line.
		slo := sloThreshold(t, loadAlerts(t))
		line := false
		for _, p := range panels {
			if len(p.Targets) != 1 || !strings.Contains(p.Targets[0].Expr, "outbox_oldest_pending_age_seconds") {
				continue
			}
			require.Equal(t, "s", p.FieldConfig.Defaults.Unit, p.Title)
			var steps []float64
			for _, s := range p.FieldConfig.Defaults.Thresholds.Steps {
				if s.Value != nil {
					steps = append(steps, *s.Value)
				}
			}
			require.Equal(t, []float64{slo}, steps, "%s: the threshold is the alert's SLO", p.Title)
			if p.Type == "timeseries" {
				require.Equal(t, "line", p.FieldConfig.Defaults.Custom.ThresholdsStyle.Mode, p.Title)
				line = true
			}
		}
		require.True(t, line, "a time series of the oldest pending age with the SLO line")
	})

	t.Run("Promtool", func(t *testing.T) {
		t.Parallel()
		promtool := requireTool(t, "promtool", "apt-get install prometheus")
		if promtool == "" {
			return
		}
		// promtool parses PromQL in recording rules: one per target, with
		// Grafana's variables given values.
		vars := strings.NewReplacer("$__rate_interval", "5m", "$table", ".*")
		rules := ruleFile{Groups: []ruleGroup{{Name: "dashboard"}}}
		for _, p := range panels {
			for _, tg := range p.Targets {
				rules.Groups[0].Rules = append(rules.Groups[0].Rules, rule{
					Record: fmt.Sprintf("dashboard:panel%d:%s", p.ID, strings.ToLower(tg.RefID)),
					Expr:   vars.Replace(tg.Expr),
				})
			}
		}
		b, err := yaml.Marshal(rules)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
		require.NoError(t, os.WriteFile(path, b, 0o600))
		out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
		require.NoError(t, err, "promtool check rules on the dashboard's queries:\n%s\n%s", out, b)
	})
}

// --- systemd ----------------------------------------------------------------

// unitFile is a parsed systemd unit: section -> key -> values, in order (a
// key may repeat).
type unitFile map[string]map[string][]string

func (u unitFile) get(section, key string) []string { return u[section][key] }

func (u unitFile) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u.get(section, key)
	require.Len(t, v, 1, "[%s] %s", section, key)
	return v[0]
}

// parseUnit reads the INI-like unit syntax: [Section] headers, Key=Value
// lines, # and ; comments, and backslash continuation lines.
func parseUnit(text string) (unitFile, error) {
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	lineNo := 0
	pending := ""
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, pending = pending+line, ""
		if strings.HasPrefix(line, "[") {
			if !strings.HasSuffix(line, "]") {
				return nil, fmt.Errorf("line %d: unclosed section header", lineNo)
			}
			section = line[1 : len(line)-1]
			if !slices.Contains([]string{"Unit", "Service", "Install"}, section) {
				return nil, fmt.Errorf("line %d: unexpected section [%s]", lineNo, section)
			}
			if u[section] != nil {
				return nil, fmt.Errorf("line %d: section [%s] twice", lineNo, section)
			}
			u[section] = map[string][]string{}
			continue
		}
		if section == "" {
			return nil, fmt.Errorf("line %d: setting outside a section", lineNo)
		}
		key, value, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return nil, fmt.Errorf("line %d: want Key=Value, got %q", lineNo, line)
		}
		u[section][key] = append(u[section][key], strings.TrimSpace(value))
	}
	if pending != "" {
		return nil, fmt.Errorf("line %d: continuation at the end of the file", lineNo)
	}
	return u, sc.Err()
}

func loadUnit(t *testing.T) unitFile {
	t.Helper()
	u, err := parseUnit(string(readFile(t, unitPath)))
	require.NoError(t, err)
	return u
}

func TestParseUnit(t *testing.T) {
	t.Parallel()
	u, err := parseUnit("# c\n[Unit]\nAfter=a.target \\\n  b.service\n[Service]\nX=1\nX=2\n; c\nEmpty=\n")
	require.NoError(t, err)
	require.Equal(t, unitFile{
		"Unit":    {"After": {"a.target  b.service"}},
		"Service": {"X": {"1", "2"}, "Empty": {""}},
	}, u)
	for text, want := range map[string]string{
		"X=1\n":                    "outside a section",
		"[Unit\n":                  "unclosed section header",
		"[Unit]\nno equals sign\n": "want Key=Value",
		"[Srvice]\nX=1\n":          "unexpected section [Srvice]",
		"[Unit]\n[Unit]\n":         "section [Unit] twice",
		"[Unit]\nA=b \\\n":         "continuation at the end",
	} {
		_, err := parseUnit(text)
		require.ErrorContains(t, err, want, text)
	}
}

// parseSeconds reads a systemd time span such as "30s", "1min 30s" or "45".
func parseSeconds(t *testing.T, span string) time.Duration {
	t.Helper()
	var total time.Duration
	for _, part := range strings.Fields(span) {
		m := regexp.MustCompile(`^([0-9]+)(ms|s|sec|m|min|h)?$`).FindStringSubmatch(part)
		require.NotNil(t, m, "time span %q", span)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		unit := map[string]time.Duration{"": time.Second, "s": time.Second, "sec": time.Second,
			"ms": time.Millisecond, "m": time.Minute, "min": time.Minute, "h": time.Hour}[m[2]]
		total += time.Duration(n) * unit
	}
	return total
}

func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	u := loadUnit(t)

	t.Run("RequiredSettings", func(t *testing.T) {
		t.Parallel()
		after := strings.Fields(u.one(t, "Unit", "After"))
		require.Subset(t, after, []string{"network-online.target", "postgresql.service"})
		require.Contains(t, strings.Fields(u.one(t, "Unit", "Wants")), "network-online.target")
		for key, want := range map[string]string{
			"Type":            "simple",
			"ExecStartPre":    binaryPath + " migrate --config " + configPath,
			"ExecStart":       binaryPath + " run --config " + configPath,
			"EnvironmentFile": "-/etc/outboxd/outboxd.env",
			"Restart":         "on-failure",
			"KillSignal":      "SIGTERM",
			"DynamicUser":     "yes",
			"NoNewPrivileges": "yes",
			"ProtectSystem":   "strict",
			"ProtectHome":     "yes",
			"PrivateTmp":      "yes",
			"PrivateDevices":  "yes",
		} {
			require.Equal(t, want, u.one(t, "Service", key), key)
		}
		require.Equal(t, "2", u.one(t, "Service", "RestartPreventExitStatus"), "a usage error does not heal by restarting")
		require.Empty(t, u.one(t, "Service", "CapabilityBoundingSet"), "no capabilities")
		require.Equal(t, "multi-user.target", u.one(t, "Install", "WantedBy"))
		// Secrets come from the environment file only.
		require.Empty(t, u.get("Service", "Environment"))
	})

	t.Run("StopTimeoutCoversAPublish", func(t *testing.T) {
		t.Parallel()
		// The effective publish timeout of the documented configuration,
		// plus room for the fenced finalize and the release of unstarted
		// rows that follow it at shutdown.
		publish, err := time.ParseDuration(documentedSettings(t)["publish-timeout"].value)
		require.NoError(t, err)
		stop := parseSeconds(t, u.one(t, "Service", "TimeoutStopSec"))
		require.GreaterOrEqual(t, stop, publish+15*time.Second,
			"TimeoutStopSec %s must exceed --publish-timeout %s by the shutdown's database round trips", stop, publish)
	})

	t.Run("MigrateUsesTheRunTable", func(t *testing.T) {
		t.Parallel()
		// ExecStartPre hands migrate the file run reads; migrate takes the
		// table from it (a table set there, not on the command line, is
		// the one created).
		require.Equal(t, []string{binaryPath, "migrate", "--config", configPath}, strings.Fields(u.one(t, "Service", "ExecStartPre")))
		schema := testdb.NewSchema(t)
		file := filepath.Join(t.TempDir(), "outboxd.yaml")
		require.NoError(t, os.WriteFile(file, []byte("table: "+schema+".relayed\nworkers: 3\n"), 0o600))
		var out bytes.Buffer
		code := cli.Main(context.Background(), []string{"migrate", "--dsn", testdb.DSN(t), "--config", file}, strings.NewReader(""), &out, &out)
		require.Equal(t, cli.ExitOK, code, out.String())
		var n int
		require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
			"SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'relayed'", schema).Scan(&n))
		require.Equal(t, 1, n, "migrate --config created the file's table")
	})

	t.Run("SystemdAnalyzeVerify", func(t *testing.T) {
		t.Parallel()
		analyze := requireTool(t, "systemd-analyze", "apt-get install systemd")
		if analyze == "" {
			return
		}
		// The binary need not be installed: verify checks that ExecStart
		// names an executable, so a copy points at /bin/true.
		dir := t.TempDir()
		path := filepath.Join(dir, "outboxd.service")
		text := strings.ReplaceAll(string(readFile(t, unitPath)), binaryPath, "/bin/true")
		require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
		var stderr bytes.Buffer
		cmd := exec.Command(analyze, "verify", path)
		cmd.Stderr = &stderr
		cmd.Stdout = &stderr
		err := cmd.Run()
		require.NoError(t, err, "systemd-analyze verify:\n%s", stderr.String())
		// verify exits 0 on settings it ignores (an unknown key, a value it
		// cannot parse) and only prints them: any line about the unit fails.
		for _, line := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(line, path) || strings.Contains(line, "outboxd.service") {
				require.Failf(t, "systemd-analyze verify complained", "%s", line)
			} else if strings.TrimSpace(line) != "" {
				t.Logf("systemd-analyze: %s", line)
			}
		}
	})
}

// envAssignments reads KEY=value lines; commented-out ones ("#KEY=value")
// are returned separately, as documented options.
func envAssignments(t *testing.T, text string) (active, commented map[string]string) {
	t.Helper()
	active, commented = map[string]string{}, map[string]string{}
	assign := regexp.MustCompile(`^(#)?([A-Z][A-Z0-9_]*)=(.*)$`)
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if m := assign.FindStringSubmatch(line); m != nil {
			if m[1] == "" {
				require.NotContains(t, active, m[2], "line %d: %s set twice", i+1, m[2])
				active[m[2]] = m[3]
			} else {
				commented[m[2]] = m[3]
			}
			continue
		}
		require.True(t, line == "" || strings.HasPrefix(line, "#"), "line %d is neither KEY=value nor a comment: %q", i+1, line)
	}
	return active, commented
}

func TestEnvExample(t *testing.T) {
	t.Parallel()
	active, commented := envAssignments(t, string(readFile(t, envExamplePath)))
	require.Contains(t, active, "OUTBOX_DSN")
	require.Contains(t, active["OUTBOX_DSN"], "CHANGE-ME", "the example holds a placeholder password, not a real one")
	settings := documentedSettings(t)
	for _, vars := range []map[string]string{active, commented} {
		for key := range vars {
			flagName, ok := strings.CutPrefix(key, "OUTBOXD_")
			if !ok {
				require.True(t, key == "OUTBOX_DSN" || strings.HasPrefix(key, "PG"), "%s is not a variable outboxd reads", key)
				continue
			}
			flagName = strings.ToLower(strings.ReplaceAll(flagName, "_", "-"))
			require.Contains(t, settings, flagName, "%s names no run flag", key)
		}
	}
}

// --- the documented configuration -------------------------------------------

// setting is one row of `outboxd config check`.
type setting struct{ value, from string }

// documentedSettings runs `outboxd config check` on exactly what a host
// installed from the docs runs: the unit's ExecStart arguments, the config
// file shown in docs/deployment.md, and the environment file example (as
// flags, which override the file just as OUTBOXD_* variables do). It
// returns the effective settings.
func documentedSettings(t *testing.T) map[string]setting {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "outboxd.yaml")
	require.NoError(t, os.WriteFile(file, []byte(documentedConfig(t)), 0o600))

	args := strings.Fields(loadUnit(t).one(t, "Service", "ExecStart"))
	require.Equal(t, []string{binaryPath, "run"}, args[:2])
	args = append([]string{"config", "check"}, args[2:]...)
	for i, a := range args {
		if a == configPath {
			args[i] = file
		}
	}
	active, _ := envAssignments(t, string(readFile(t, envExamplePath)))
	for key, value := range active {
		switch {
		case key == "OUTBOX_DSN":
			args = append(args, "--dsn", value)
		case strings.HasPrefix(key, "OUTBOXD_"):
			args = append(args, "--"+strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(key, "OUTBOXD_"), "_", "-")), value)
		}
	}

	var stdout, stderr bytes.Buffer
	code := cli.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, cli.ExitOK, code, "outboxd %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "configuration is valid")
	require.NotContains(t, stdout.String()+stderr.String(), "CHANGE-ME", "the DSN password is masked")

	settings := map[string]setting{}
	inTable := false
	for _, line := range strings.Split(stdout.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "SETTING":
			inTable = true
		case inTable && len(f) >= 2 && slices.Contains([]string{"default", "file", "env", "flag"}, f[len(f)-1]):
			settings[f[0]] = setting{value: strings.Join(f[1:len(f)-1], " "), from: f[len(f)-1]}
		default:
			inTable = false
		}
	}
	require.NotEmpty(t, settings, "config check printed its settings table:\n%s", stdout.String())
	return settings
}

// documentedConfig is the yaml block of docs/deployment.md that starts with
// "# /etc/outboxd/outboxd.yaml".
func documentedConfig(t *testing.T) string {
	t.Helper()
	for _, block := range codeBlocks(t, deploymentDoc, "yaml") {
		if strings.HasPrefix(block, "# "+configPath+"\n") {
			return block
		}
	}
	require.FailNowf(t, "no config", "%s shows no yaml block starting with # %s", deploymentDoc, configPath)
	return ""
}

func TestDocumentedConfig(t *testing.T) {
	t.Parallel()
	settings := documentedSettings(t)
	// The settings the deployment relies on come from the file, as written.
	for name, want := range map[string]string{
		"metrics-addr": ":9090",
		"retention":    "168h0m0s",
		"log-format":   "json",
	} {
		require.Equal(t, setting{value: want, from: "file"}, settings[name], name)
	}
	require.Equal(t, "flag", settings["dsn"].from, "the DSN comes from the environment file")
}

// --- the docs -------------------------------------------------------------------

// codeBlocks returns the fenced code blocks of a markdown file with the
// given info string.
func codeBlocks(t *testing.T, path, lang string) []string {
	t.Helper()
	var blocks []string
	var cur *strings.Builder
	inBlock := false
	for _, line := range strings.Split(string(readFile(t, path)), "\n") {
		if strings.HasPrefix(line, "```") {
			if !inBlock {
				if strings.TrimSpace(strings.TrimPrefix(line, "```")) == lang {
					cur = &strings.Builder{}
				}
			} else if cur != nil {
				blocks = append(blocks, cur.String())
				cur = nil
			}
			inBlock = !inBlock
			continue
		}
		if cur != nil {
			cur.WriteString(line + "\n")
		}
	}
	return blocks
}

// markdownAnchors returns the GitHub anchors of a markdown file's headings
// (code blocks excluded).
func markdownAnchors(t *testing.T, path string) []string {
	t.Helper()
	var anchors []string
	inCode := false
	for _, line := range strings.Split(string(readFile(t, path)), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		anchors = append(anchors, b.String())
	}
	return anchors
}

func TestDocsLinks(t *testing.T) {
	t.Parallel()
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range []string{deploymentDoc, operationsDoc} {
		text := string(readFile(t, doc))
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
				_, err := os.Stat(path)
				require.NoError(t, err, "%s links to %s", doc, target)
			}
			if anchor != "" {
				require.Contains(t, markdownAnchors(t, path), anchor, "%s links to %s", doc, target)
			}
		}
	}
}

func TestDocsScrapeConfig(t *testing.T) {
	t.Parallel()
	job := scrapeJob(t, loadAlerts(t))
	var found bool
	for _, block := range codeBlocks(t, deploymentDoc, "yaml") {
		var cfg struct {
			RuleFiles     []string `yaml:"rule_files"`
			ScrapeConfigs []struct {
				JobName       string `yaml:"job_name"`
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		if !strings.Contains(block, "scrape_configs:") {
			continue
		}
		found = true
		require.NoError(t, yaml.Unmarshal([]byte(block), &cfg))
		require.Len(t, cfg.ScrapeConfigs, 1)
		require.Equal(t, job, cfg.ScrapeConfigs[0].JobName, "the alert rules' job label")
		require.NotEmpty(t, cfg.RuleFiles)
		port := strings.TrimPrefix(documentedSettings(t)["metrics-addr"].value, ":")
		for _, target := range cfg.ScrapeConfigs[0].StaticConfigs[0].Targets {
			require.True(t, strings.HasSuffix(target, ":"+port), "%s scrapes the --metrics-addr port %s", target, port)
		}
	}
	require.True(t, found, "%s shows a Prometheus scrape config", deploymentDoc)
}

func TestDocsKubernetes(t *testing.T) {
	t.Parallel()
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	}
	type container struct {
		Name    string   `yaml:"name"`
		Args    []string `yaml:"args"`
		EnvFrom []struct {
			SecretRef *struct {
				Name string `yaml:"name"`
			} `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
	}
	var dep struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Replicas int `yaml:"replicas"`
			Template struct {
				Spec struct {
					TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
					InitContainers                []container `yaml:"initContainers"`
					Containers                    []container `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	found := false
	for _, block := range codeBlocks(t, deploymentDoc, "yaml") {
		if strings.Contains(block, "kind: Deployment") {
			found = true
			require.NoError(t, yaml.Unmarshal([]byte(block), &dep))
		}
	}
	require.True(t, found, "%s shows a Kubernetes Deployment", deploymentDoc)
	require.GreaterOrEqual(t, dep.Spec.Replicas, 2, "replicas run side by side")
	pod := dep.Spec.Template.Spec
	require.Len(t, pod.InitContainers, 1)
	require.Equal(t, []string{"migrate"}, pod.InitContainers[0].Args)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, []string{"run", "--config", configPath}, c.Args)
	require.NotEmpty(t, c.EnvFrom)
	require.NotNil(t, c.EnvFrom[0].SecretRef, "the DSN comes from a Secret")
	require.NotNil(t, c.ReadinessProbe)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.NotNil(t, c.LivenessProbe)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Len(t, c.Ports, 1)
	require.Equal(t, c.Ports[0].Name, c.ReadinessProbe.HTTPGet.Port)
	settings := documentedSettings(t)
	require.Equal(t, ":"+strconv.Itoa(c.Ports[0].ContainerPort), settings["metrics-addr"].value)
	publish, err := time.ParseDuration(settings["publish-timeout"].value)
	require.NoError(t, err)
	require.Greater(t, time.Duration(pod.TerminationGracePeriodSeconds)*time.Second, publish+15*time.Second,
		"terminationGracePeriodSeconds covers the in-flight publishes and the final round trips")
}
