package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outbox/internal/cli"
	"github.com/outboxd/outbox/internal/testio"
)

const (
	chartPath       = "helm/outboxd"
	chartAlertsPath = "helm/outboxd/files/alerts.yml"
	helmInstall     = "go install helm.sh/helm/v4/cmd/helm@v4.3.2"
)

// manifest is one rendered Kubernetes object, kept generic: the test reads
// the fields it checks by path.
type manifest map[string]any

func (m manifest) kind() string { return str(m["kind"]) }

func (m manifest) name() string { return str(dig(m, "metadata", "name")) }

func str(v any) string { s, _ := v.(string); return s }

// dig walks maps by key and lists by the "name" of their elements. yaml
// decodes nested maps into the type of the outer one, manifest.
func dig(v any, path ...string) any {
	for _, p := range path {
		if m, ok := asMap(v); ok {
			v = m[p]
			continue
		}
		list, ok := v.([]any)
		if !ok {
			return nil
		}
		v = nil
		for _, e := range list {
			if em, ok := asMap(e); ok && em["name"] == p {
				v = em
			}
		}
	}
	return v
}

func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case manifest:
		return m, true
	case map[string]any:
		return m, true
	}
	return nil, false
}

// renderChart runs helm template with the given --set values and returns
// the objects, or nil when helm is not installed.
func renderChart(t *testing.T, helm string, set ...string) []manifest {
	t.Helper()
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return renderChartArgs(t, helm, args...)
}

// renderChartArgs runs helm template with the given arguments.
func renderChartArgs(t *testing.T, helm string, more ...string) []manifest {
	t.Helper()
	args := append([]string{"template", "relay", chartPath, "--namespace", "apps"}, more...)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "helm %s:\n%s", strings.Join(args, " "), stderr.String())
	var out []manifest
	dec := yaml.NewDecoder(&stdout)
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if m != nil {
			out = append(out, m)
		}
	}
	return out
}

func find(t *testing.T, ms []manifest, kind, name string) manifest {
	t.Helper()
	for _, m := range ms {
		if m.kind() == kind && m.name() == name {
			return m
		}
	}
	var seen []string
	for _, m := range ms {
		seen = append(seen, m.kind()+"/"+m.name())
	}
	require.FailNowf(t, "not rendered", "no %s %s among %v", kind, name, seen)
	return nil
}

func TestHelmChartAlertsAreTheRules(t *testing.T) {
	t.Parallel()
	require.Equal(t, string(readFile(t, alertsPath)), string(readFile(t, chartAlertsPath)),
		"%s is a copy of %s: cp %s %s", chartAlertsPath, alertsPath, "deploy/"+alertsPath, "deploy/"+chartAlertsPath)
}

func TestHelmChart(t *testing.T) {
	t.Parallel()
	helm := requireTool(t, "helm", helmInstall)
	if helm == "" {
		return
	}
	const dsn = "postgres://outboxd:CHANGE-ME@db:5432/app"
	ms := renderChart(t, helm, "secret.dsn="+dsn, "serviceMonitor.enabled=true", "prometheusRule.enabled=true",
		"settings.table=app.outbox")

	t.Run("Lint", func(t *testing.T) {
		t.Parallel()
		out, err := exec.Command(helm, "lint", "--strict", chartPath, "--set", "secret.dsn="+dsn).CombinedOutput()
		require.NoError(t, err, "helm lint:\n%s", out)
	})

	dep := find(t, ms, "Deployment", "relay-outboxd")
	pod, _ := asMap(dig(dep, "spec", "template", "spec"))
	c, _ := asMap(dig(pod, "containers", "outboxd"))

	t.Run("Deployment", func(t *testing.T) {
		t.Parallel()
		require.GreaterOrEqual(t, dig(dep, "spec", "replicas"), 2, "replicas run side by side")
		require.Equal(t, []any{"run"}, c["args"])
		require.Equal(t, "/readyz", dig(c, "readinessProbe", "httpGet", "path"))
		require.Equal(t, "/healthz", dig(c, "livenessProbe", "httpGet", "path"))
		require.Equal(t, "metrics", dig(c, "readinessProbe", "httpGet", "port"))
		require.Equal(t, "metrics", dig(c, "livenessProbe", "httpGet", "port"))
		require.Equal(t, 9090, dig(c, "ports", "metrics", "containerPort"))
		require.NotNil(t, dig(c, "resources", "requests", "cpu"))
		require.NotNil(t, dig(c, "resources", "limits", "memory"))
		require.Greater(t, pod["terminationGracePeriodSeconds"], 25)
	})

	t.Run("SecurityContext", func(t *testing.T) {
		t.Parallel()
		psc := mapAt(t, pod["securityContext"])
		require.Equal(t, true, psc["runAsNonRoot"])
		require.Equal(t, imageUser, strings.TrimSpace(yamlText(t, psc["runAsUser"])), "the image's USER")
		require.Equal(t, "RuntimeDefault", dig(psc, "seccompProfile", "type"))
		sc := mapAt(t, c["securityContext"])
		require.Equal(t, true, sc["readOnlyRootFilesystem"])
		require.Equal(t, false, sc["allowPrivilegeEscalation"])
		require.Equal(t, []any{"ALL"}, dig(sc, "capabilities", "drop"))
	})

	t.Run("EnvIsAValidConfiguration", func(t *testing.T) {
		t.Parallel()
		cm := find(t, ms, "ConfigMap", "relay-outboxd")
		sec := find(t, ms, "Secret", "relay-outboxd")
		var refs []string
		for _, e := range c["envFrom"].([]any) {
			for _, kind := range []string{"configMapRef", "secretRef"} {
				if n := str(dig(e, kind, "name")); n != "" {
					refs = append(refs, kind+"/"+n)
				}
			}
		}
		require.ElementsMatch(t, []string{"configMapRef/relay-outboxd", "secretRef/relay-outboxd"}, refs)
		env := map[string]string{}
		for k, v := range mapAt(t, cm["data"]) {
			require.True(t, strings.HasPrefix(k, "OUTBOXD_"), k)
			env[k] = str(v)
		}
		require.Equal(t, ":9090", env["OUTBOXD_METRICS_ADDR"], "the probes' port")
		require.Equal(t, "app.outbox", env["OUTBOXD_TABLE"])
		require.Equal(t, dsn, dig(sec, "stringData", "OUTBOX_DSN"))
		// Each variable names a flag of run (OUTBOXD_<FLAG>, "-" as "_"),
		// and its value is one run accepts: config check takes them all.
		args := []string{"config", "check", "--dsn", dsn}
		for k, v := range env {
			args = append(args, "--"+strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "OUTBOXD_"), "_", "-")), v)
		}
		var stdout, stderr bytes.Buffer
		code := cli.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, cli.ExitOK, code, "outboxd %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
		require.NotContains(t, stdout.String(), "CHANGE-ME")
	})

	t.Run("MigrateHook", func(t *testing.T) {
		t.Parallel()
		job := find(t, ms, "Job", "relay-outboxd-migrate")
		ann := mapAt(t, dig(job, "metadata", "annotations"))
		require.Equal(t, "pre-install,pre-upgrade", ann["helm.sh/hook"])
		jc := mapAt(t, dig(job, "spec", "template", "spec", "containers", "migrate"))
		require.Equal(t, []any{"migrate"}, jc["args"])
		require.Equal(t, "app.outbox", str(dig(jc, "env", "OUTBOXD_TABLE", "value")), "migrate creates the table run reads")
		secretName := str(dig(jc["envFrom"].([]any)[0], "secretRef", "name"))
		sec := find(t, ms, "Secret", secretName)
		require.Equal(t, dsn, dig(sec, "stringData", "OUTBOX_DSN"))
		secAnn := mapAt(t, dig(sec, "metadata", "annotations"))
		require.Equal(t, "pre-install,pre-upgrade", secAnn["helm.sh/hook"], "the hook's Secret exists before the Job runs")
		require.Less(t, yamlText(t, secAnn["helm.sh/hook-weight"]), yamlText(t, ann["helm.sh/hook-weight"]))
		require.Equal(t, pod["securityContext"], dig(job, "spec", "template", "spec", "securityContext"))
		require.Equal(t, c["securityContext"], jc["securityContext"])
	})

	t.Run("PodDisruptionBudget", func(t *testing.T) {
		t.Parallel()
		pdb := find(t, ms, "PodDisruptionBudget", "relay-outboxd")
		require.Equal(t, dig(dep, "spec", "selector", "matchLabels"), dig(pdb, "spec", "selector", "matchLabels"))
		require.Equal(t, 1, dig(pdb, "spec", "maxUnavailable"))
	})

	t.Run("Monitoring", func(t *testing.T) {
		t.Parallel()
		sm := find(t, ms, "ServiceMonitor", "relay-outboxd")
		svc := find(t, ms, "Service", "relay-outboxd")
		job := dig(svc, "metadata", "labels", str(dig(sm, "spec", "jobLabel")))
		require.Equal(t, "outboxd", job, "the alert rules select job=\"outboxd\"")
		rule := find(t, ms, "PrometheusRule", "relay-outboxd")
		var want map[string]any
		require.NoError(t, yaml.Unmarshal(readFile(t, alertsPath), &want))
		require.Equal(t, yamlText(t, want), yamlText(t, rule["spec"]), "the rules are deploy/prometheus/alerts.yml")
	})

	t.Run("Pipelines", func(t *testing.T) {
		t.Parallel()
		ms := renderChartArgs(t, helm, "--set", "secret.dsn="+dsn, "--set", "settings.table=app.outbox", "--set-json",
			`pipelines=[{"name":"orders","table":"orders.outbox","ordered":true},{"name":"tenants","table":"tenant_*.outbox","workers":4}]`)
		dep := find(t, ms, "Deployment", "relay-outboxd")
		pod := mapAt(t, dig(dep, "spec", "template", "spec"))
		c := mapAt(t, dig(pod, "containers", "outboxd"))
		require.Equal(t, []any{"run", "--config", "/etc/outboxd/pipelines.yaml"}, c["args"])
		require.Equal(t, "/etc/outboxd", dig(c, "volumeMounts", "pipelines", "mountPath"))
		require.Equal(t, "relay-outboxd-pipelines", dig(pod, "volumes", "pipelines", "secret", "secretName"))
		require.NotEmpty(t, dig(dep, "spec", "template", "metadata", "annotations", "checksum/pipelines"), "a changed list rolls the pods")
		file := str(dig(find(t, ms, "Secret", "relay-outboxd-pipelines"), "stringData", "pipelines.yaml"))
		cm := find(t, ms, "ConfigMap", "relay-outboxd")
		_, hasTable := mapAt(t, cm["data"])["OUTBOXD_TABLE"]
		require.False(t, hasTable, "each pipeline names its table")

		// The file and the variables are a configuration run accepts.
		path := filepath.Join(t.TempDir(), "pipelines.yaml")
		require.NoError(t, os.WriteFile(path, []byte(file), 0o600))
		args := []string{"config", "check", "--dsn", dsn, "--config", path}
		for k, v := range mapAt(t, cm["data"]) {
			args = append(args, "--"+strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "OUTBOXD_"), "_", "-")), str(v))
		}
		var stdout, stderr bytes.Buffer
		code := cli.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, cli.ExitOK, code, "outboxd %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
		require.Contains(t, stdout.String(), "configuration is valid (2 pipelines)")
		require.Regexp(t, `(?m)^workers\s+4\s+pipeline$`, stdout.String())

		// The hook migrates every pipeline's table from the same list.
		job := find(t, ms, "Job", "relay-outboxd-migrate")
		jpod := mapAt(t, dig(job, "spec", "template", "spec"))
		jc := mapAt(t, dig(jpod, "containers", "migrate"))
		require.Equal(t, []any{"migrate", "--config", "/etc/outboxd/pipelines.yaml"}, jc["args"])
		hook := find(t, ms, "Secret", str(dig(jpod, "volumes", "pipelines", "secret", "secretName")))
		require.Equal(t, "pre-install,pre-upgrade", dig(hook, "metadata", "annotations", "helm.sh/hook"), "there before the Job runs")
		require.Equal(t, file, str(dig(hook, "stringData", "pipelines.yaml")))
		require.Nil(t, dig(jc, "env", "OUTBOXD_TABLE"))
	})

	t.Run("ExistingSecretAndOptionalParts", func(t *testing.T) {
		t.Parallel()
		ms := renderChart(t, helm, "secret.existingSecret=outboxd-db")
		kinds := []string{}
		for _, m := range ms {
			kinds = append(kinds, m.kind()+"/"+m.name())
		}
		require.NotContains(t, kinds, "Secret/relay-outboxd")
		require.NotContains(t, kinds, "Secret/relay-outboxd-migrate")
		require.NotContains(t, kinds, "ServiceMonitor/relay-outboxd")
		require.NotContains(t, kinds, "PrometheusRule/relay-outboxd")
		job := find(t, ms, "Job", "relay-outboxd-migrate")
		jc := dig(job, "spec", "template", "spec", "containers", "migrate")
		require.Equal(t, "outboxd-db", dig(mapAt(t, jc)["envFrom"].([]any)[0], "secretRef", "name"))
		require.True(t, slices.Contains(kinds, "Deployment/relay-outboxd"))
	})
}

func yamlText(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func mapAt(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := asMap(v)
	require.True(t, ok, "want a map, got %T", v)
	return m
}

// tls.secretName mounts a TLS Secret whole (so that a renewal reaches the
// files), points --tls-cert and --tls-key at it through variables run
// reads, and makes the probes and the scrape HTTPS.
func TestHelmChartTLS(t *testing.T) {
	t.Parallel()
	helm := requireTool(t, "helm", helmInstall)
	if helm == "" {
		return
	}
	ms := renderChart(t, helm, "secret.dsn=postgres://db/app", "serviceMonitor.enabled=true", "tls.secretName=relay-tls",
		"pipelines[0].name=orders", "pipelines[0].table=orders.outbox")
	dep := find(t, ms, "Deployment", "relay-outboxd")
	pod, _ := asMap(dig(dep, "spec", "template", "spec"))
	c, _ := asMap(dig(pod, "containers", "outboxd"))
	require.Equal(t, "relay-tls", dig(pod, "volumes", "tls", "secret", "secretName"))
	require.Equal(t, "relay-outboxd-pipelines", dig(pod, "volumes", "pipelines", "secret", "secretName"), "both volumes")
	mount, _ := asMap(dig(c, "volumeMounts", "tls"))
	require.Equal(t, "/etc/outboxd-tls", mount["mountPath"])
	require.Nil(t, mount["subPath"], "a subPath mount never sees a renewal")
	env := map[string]string{}
	for _, e := range c["env"].([]any) {
		m, _ := asMap(e)
		env[str(m["name"])] = str(m["value"])
	}
	require.Equal(t, map[string]string{"OUTBOXD_TLS_CERT": "/etc/outboxd-tls/tls.crt", "OUTBOXD_TLS_KEY": "/etc/outboxd-tls/tls.key"}, env)
	// Each variable names a flag of run: config check takes them, on a
	// real pair of files.
	cert, _ := testio.SelfSigned(t, "relay")
	certFile, keyFile := testio.WriteCert(t, t.TempDir(), cert)
	files := map[string]string{"/etc/outboxd-tls/tls.crt": certFile, "/etc/outboxd-tls/tls.key": keyFile}
	args := []string{"config", "check", "--dsn", "postgres://db/app", "--metrics-addr", ":9090"}
	for k, v := range env {
		args = append(args, "--"+strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "OUTBOXD_"), "_", "-")), files[v])
	}
	var stdout, stderr bytes.Buffer
	code := cli.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, cli.ExitOK, code, "outboxd %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
	require.Equal(t, "HTTPS", dig(c, "readinessProbe", "httpGet", "scheme"))
	require.Equal(t, "HTTPS", dig(c, "livenessProbe", "httpGet", "scheme"))
	sm := find(t, ms, "ServiceMonitor", "relay-outboxd")
	ep, _ := asMap(dig(sm, "spec", "endpoints").([]any)[0])
	require.Equal(t, "https", ep["scheme"])
	require.Equal(t, true, dig(ep, "tlsConfig", "insecureSkipVerify"))

	plain := renderChart(t, helm, "secret.dsn=postgres://db/app", "serviceMonitor.enabled=true")
	c, _ = asMap(dig(find(t, plain, "Deployment", "relay-outboxd"), "spec", "template", "spec", "containers", "outboxd"))
	require.Nil(t, dig(c, "readinessProbe", "httpGet", "scheme"), "HTTP without a certificate")
	require.Nil(t, c["volumeMounts"])
	ep, _ = asMap(dig(find(t, plain, "ServiceMonitor", "relay-outboxd"), "spec", "endpoints").([]any)[0])
	require.Nil(t, ep["scheme"])
}
