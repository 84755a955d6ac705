package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The metric contract shared by the metrics package, the alert rules and
// the dashboard. Every series carries a table label; Prometheus adds job
// and instance at scrape time.
type metricKind int

const (
	gauge metricKind = iota
	counter
	histogram
)

type metricSpec struct {
	kind   metricKind
	labels []string
}

var contract = map[string]metricSpec{
	"outbox_messages":                     {gauge, []string{"table", "status"}},
	"outbox_oldest_pending_age_seconds":   {gauge, []string{"table"}},
	"outbox_expired_leases":               {gauge, []string{"table"}},
	"outbox_live_dispatchers":             {gauge, []string{"table"}},
	"outbox_db_refresh_errors_total":      {counter, []string{"table"}},
	"outbox_db_refresh_timestamp_seconds": {gauge, []string{"table"}},
	"outbox_publishes_total":              {counter, []string{"table", "sink", "outcome"}},
	"outbox_publish_duration_seconds":     {histogram, []string{"table", "sink"}},
	"outbox_delivery_lag_seconds":         {histogram, []string{"table", "sink"}},
	"outbox_claim_batch_size":             {histogram, []string{"table"}},
	"outbox_claim_duration_seconds":       {histogram, []string{"table"}},
	"outbox_claim_errors_total":           {counter, []string{"table"}},
	"outbox_claims_failing":               {gauge, []string{"table"}},
	"outbox_claim_outages_total":          {counter, []string{"table"}},
	"outbox_finalize_duration_seconds":    {histogram, []string{"table"}},
	"outbox_finalize_errors_total":        {counter, []string{"table"}},
	"outbox_fenced_finalizes_total":       {counter, []string{"table"}},
	"outbox_heartbeats_total":             {counter, []string{"table"}},
	"outbox_heartbeat_lost_leases_total":  {counter, []string{"table"}},
	"outbox_hung_publishes_total":         {counter, []string{"table"}},
	"outbox_sink_paused":                  {gauge, []string{"table", "sink"}},
	"outbox_sink_pauses_total":            {counter, []string{"table", "sink"}},
	"outbox_dispatcher_up":                {gauge, []string{"table"}},
}

// labelValues are the closed value sets of the contract's enum labels.
var labelValues = map[string][]string{
	"status":  {"pending", "processing", "done", "dead"},
	"outcome": {"done", "retry", "defer", "dead", "released", "lease_lost"},
}

// targetLabels are added by Prometheus to every scraped series.
var targetLabels = []string{"job", "instance"}

// seriesLabels returns the labels a series name may carry, and whether the
// name is one the contract (or Prometheus itself, for up) produces: a
// histogram exposes _bucket (with le), _sum and _count, never its bare name.
func seriesLabels(name string) ([]string, bool) {
	if name == "up" {
		return targetLabels, true
	}
	if spec, ok := contract[name]; ok && spec.kind != histogram {
		return append(slices.Clone(spec.labels), targetLabels...), true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if spec, known := contract[base]; ok && known && spec.kind == histogram {
			labels := append(slices.Clone(spec.labels), targetLabels...)
			if suffix == "_bucket" {
				labels = append(labels, "le")
			}
			return labels, true
		}
	}
	return nil, false
}

// matcher is one label matcher of a selector: label op "value".
type matcher struct {
	label, op, value string
}

// selector is one series selector found in an expression.
type selector struct {
	name     string
	matchers []matcher
}

// scanned is what scanPromQL finds in an expression.
type scanned struct {
	selectors []selector
	// grouping holds every label named in by/without/on/ignoring/group_*.
	grouping []string
}

// PromQL words that are never metric names.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true, "inf": true, "nan": true,
}

var groupingKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// scanPromQL finds the series selectors and grouping labels of a PromQL
// expression (Grafana's $variables allowed). It is a scanner, not a parser:
// it relies on promtool, where present, for full syntax checks, and is
// exact about what matters here: which metric names and labels an
// expression reads.
func scanPromQL(expr string) (scanned, error) {
	var out scanned
	n := len(expr)
	for i := 0; i < n; {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < n && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			_, next, err := scanString(expr, i)
			if err != nil {
				return out, err
			}
			i = next
		case c == '[':
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return out, fmt.Errorf("unclosed [ at %d", i)
			}
			i += end + 1
		case c == '{':
			return out, fmt.Errorf("selector without a metric name at %d", i)
		case c == '$':
			// A Grafana variable such as $table or ${datasource}.
			i++
			if i < n && expr[i] == '{' {
				end := strings.IndexByte(expr[i:], '}')
				if end < 0 {
					return out, fmt.Errorf("unclosed ${ at %d", i)
				}
				i += end + 1
				continue
			}
			for i < n && isIdentByte(expr[i], false) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < n && (isIdentByte(expr[i], false) || expr[i] == '.') {
				i++
			}
		case isIdentByte(c, true):
			start := i
			for i < n && isIdentByte(expr[i], false) {
				i++
			}
			word := expr[start:i]
			j := i
			for j < n && (expr[j] == ' ' || expr[j] == '\t' || expr[j] == '\n' || expr[j] == '\r') {
				j++
			}
			next := byte(0)
			if j < n {
				next = expr[j]
			}
			switch {
			case groupingKeywords[word]:
				if next == '(' {
					end := strings.IndexByte(expr[j:], ')')
					if end < 0 {
						return out, fmt.Errorf("unclosed %s( at %d", word, j)
					}
					for _, l := range strings.Split(expr[j+1:j+end], ",") {
						if l = strings.TrimSpace(l); l != "" {
							out.grouping = append(out.grouping, l)
						}
					}
					i = j + end + 1
				}
			case promqlKeywords[word], next == '(':
				// An operator, an aggregation or a function call.
			default:
				sel := selector{name: word}
				if next == '{' {
					ms, end, err := scanMatchers(expr, j)
					if err != nil {
						return out, fmt.Errorf("%s: %w", word, err)
					}
					sel.matchers = ms
					i = end
				}
				out.selectors = append(out.selectors, sel)
			}
		default:
			i++
		}
	}
	return out, nil
}

func isIdentByte(c byte, first bool) bool {
	if c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		return true
	}
	return !first && c >= '0' && c <= '9'
}

// scanString reads the quoted string starting at expr[i] and returns its
// content and the index after it.
func scanString(expr string, i int) (string, int, error) {
	quote := expr[i]
	var b strings.Builder
	for j := i + 1; j < len(expr); j++ {
		switch c := expr[j]; {
		case c == '\\' && quote != '`' && j+1 < len(expr):
			j++
			b.WriteByte(expr[j])
		case c == quote:
			return b.String(), j + 1, nil
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("unclosed string at %d", i)
}

// scanMatchers reads {label op "value", ...} starting at expr[i] == '{'.
func scanMatchers(expr string, i int) ([]matcher, int, error) {
	var ms []matcher
	i++
	for {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == ',' || expr[i] == '\n') {
			i++
		}
		if i >= len(expr) {
			return nil, 0, fmt.Errorf("unclosed {")
		}
		if expr[i] == '}' {
			return ms, i + 1, nil
		}
		start := i
		for i < len(expr) && isIdentByte(expr[i], i == start) {
			i++
		}
		label := expr[start:i]
		if label == "" {
			return nil, 0, fmt.Errorf("want a label name at %d", start)
		}
		for i < len(expr) && expr[i] == ' ' {
			i++
		}
		op := ""
		for _, candidate := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(expr[i:], candidate) {
				op = candidate
				break
			}
		}
		if op == "" {
			return nil, 0, fmt.Errorf("want =, !=, =~ or !~ after %s", label)
		}
		i += len(op)
		for i < len(expr) && expr[i] == ' ' {
			i++
		}
		if i >= len(expr) || !strings.ContainsRune("\"'`", rune(expr[i])) {
			return nil, 0, fmt.Errorf("want a quoted value for %s", label)
		}
		value, next, err := scanString(expr, i)
		if err != nil {
			return nil, 0, err
		}
		ms = append(ms, matcher{label: label, op: op, value: value})
		i = next
	}
}

// contractProblems lists everything in expr that the metric contract does
// not provide: unknown metric names, labels a series does not carry, and
// status/outcome values outside their sets.
func contractProblems(expr string) []string {
	s, err := scanPromQL(expr)
	if err != nil {
		return []string{"cannot scan: " + err.Error()}
	}
	var problems []string
	allLabels := map[string]bool{"le": true}
	for _, l := range targetLabels {
		allLabels[l] = true
	}
	for _, spec := range contract {
		for _, l := range spec.labels {
			allLabels[l] = true
		}
	}
	for _, sel := range s.selectors {
		labels, ok := seriesLabels(sel.name)
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %q is not in the contract", sel.name))
			continue
		}
		for _, m := range sel.matchers {
			if !slices.Contains(labels, m.label) {
				problems = append(problems, fmt.Sprintf("%s has no label %q", sel.name, m.label))
				continue
			}
			allowed, enum := labelValues[m.label]
			if !enum || strings.Contains(m.value, "$") {
				continue
			}
			values := []string{m.value}
			if m.op == "=~" || m.op == "!~" {
				values = strings.Split(m.value, "|")
			}
			for _, v := range values {
				if !slices.Contains(allowed, v) {
					problems = append(problems, fmt.Sprintf("%s: %s value %q is not one of %v", sel.name, m.label, v, allowed))
				}
			}
		}
	}
	for _, l := range s.grouping {
		if !allLabels[l] {
			problems = append(problems, fmt.Sprintf("grouping label %q is on no contract metric", l))
		}
	}
	return problems
}

// metricNames returns the distinct metric names expr reads.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	s, err := scanPromQL(expr)
	require.NoError(t, err, expr)
	var names []string
	for _, sel := range s.selectors {
		if !slices.Contains(names, sel.name) {
			names = append(names, sel.name)
		}
	}
	return names
}

func TestScanPromQL(t *testing.T) {
	t.Parallel()

	t.Run("FindsSelectorsMatchersAndGrouping", func(t *testing.T) {
		t.Parallel()
		s, err := scanPromQL(`histogram_quantile(0.99, sum by (table, le) (rate(outbox_delivery_lag_seconds_bucket{table=~"$table", sink!="x"}[$__rate_interval])))
			/ on (table) group_left max without(instance) (outbox_expired_leases offset 5m) > bool 3e2
			or absent(up{job='outboxd'}) # a comment naming not_a_metric`)
		require.NoError(t, err)
		require.Equal(t, []selector{
			{name: "outbox_delivery_lag_seconds_bucket", matchers: []matcher{{"table", "=~", "$table"}, {"sink", "!=", "x"}}},
			{name: "outbox_expired_leases"},
			{name: "up", matchers: []matcher{{"job", "=", "outboxd"}}},
		}, s.selectors)
		require.Equal(t, []string{"table", "le", "table", "instance"}, s.grouping)
	})

	t.Run("AcceptsTheContract", func(t *testing.T) {
		t.Parallel()
		for _, expr := range []string{
			`max by (table) (outbox_messages{status="dead"})`,
			`sum by (outcome) (rate(outbox_publishes_total{outcome=~"done|retry"}[5m]))`,
			`histogram_quantile(0.5, sum by (le) (rate(outbox_claim_batch_size_bucket[5m])))`,
			`time() - outbox_db_refresh_timestamp_seconds{instance="a:9090"} > 120`,
			`up{job="outboxd"} == 0`,
		} {
			require.Empty(t, contractProblems(expr), expr)
		}
	})

	t.Run("RejectsWhatTheContractLacks", func(t *testing.T) {
		t.Parallel()
		for expr, want := range map[string]string{
			`outbox_message{status="dead"}`:                          `metric "outbox_message" is not in the contract`,
			`outbox_messages{state="dead"}`:                          `outbox_messages has no label "state"`,
			`outbox_messages{status="failed"}`:                       `status value "failed" is not one of`,
			`rate(outbox_publishes_total{outcome=~"done|lost"}[5m])`: `outcome value "lost" is not one of`,
			`outbox_delivery_lag_seconds > 1`:                        `metric "outbox_delivery_lag_seconds" is not in the contract`,
			`outbox_expired_leases_bucket`:                           `metric "outbox_expired_leases_bucket" is not in the contract`,
			`outbox_claim_duration_seconds_sum{le="1"}`:              `has no label "le"`,
			`sum by (sinks) (outbox_publishes_total)`:                `grouping label "sinks" is on no contract metric`,
			`process_start_time_seconds`:                             `metric "process_start_time_seconds" is not in the contract`,
			`{__name__="outbox_messages"}`:                           `selector without a metric name`,
		} {
			problems := contractProblems(expr)
			require.NotEmpty(t, problems, expr)
			require.Contains(t, strings.Join(problems, "\n"), want, expr)
		}
	})
}
