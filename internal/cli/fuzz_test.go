package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"7d", "36h", "1h30m", "0", "-5s", "d", "99999999d", "1.5h", "", "5x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDuration(s)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid duration") {
				t.Fatalf("error %q does not say what is wrong", err)
			}
			return
		}
		if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && d%(24*time.Hour) != 0 {
			t.Fatalf("%q parsed to %s, not whole days", s, d)
		}
	})
}

func FuzzParseRouteFlag(f *testing.F) {
	for _, s := range []string{
		"event_type=Order*=nats://127.0.0.1:4222?subject=x",
		"aggregate_type=order|invoice,event_type=A=http://u:p@h/p?a=b",
		"nosink", "colour=red=stdout", "event_type==stdout", "=", ",=,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseRouteFlag(s)
		if err != nil {
			return
		}
		if r.Sink == "" {
			t.Fatalf("%q parsed without a sink", s)
		}
		if len(r.AggregateTypes)+len(r.EventTypes) == 0 {
			t.Fatalf("%q parsed without a filter", s)
		}
	})
}

func FuzzLoadConfigFile(f *testing.F) {
	for _, s := range []string{
		"workers: 20\nlease: 90s\n",
		"routes:\n  - event_type: [A, B]\n    sink: stdout\n",
		"routes: 5\n", "workers: [1\n", "---\n", "a: {b: c}\n", "dsn: postgres://u:p@h/db\n",
	} {
		f.Add(s)
	}
	dir := f.TempDir()
	known := func(k string) bool { return k == "workers" || k == "lease" || k == "dsn" || k == "sink" }
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cf, err := loadConfigFile(path, known)
		if err != nil {
			if ue := (*usageError)(nil); !errors.As(err, &ue) {
				t.Fatalf("config error is not a usage error: %v", err)
			}
			return
		}
		for k := range cf.values {
			if !known(k) {
				t.Fatalf("unknown key %q accepted", k)
			}
		}
		for _, r := range cf.routes {
			if r.Sink == "" {
				t.Fatal("route without a sink accepted")
			}
		}
	})
}
