package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// Configuration comes in layers, highest precedence first:
//
//  1. flags on the command line;
//  2. environment variables OUTBOXD_<FLAG> (upper case, "-" as "_"), e.g.
//     OUTBOXD_WORKERS=20; the DSN also from OUTBOX_DSN;
//  3. the YAML file named by --config (or $OUTBOXD_CONFIG), whose keys are
//     the flag names (workers: 20, publish-timeout: 5s) plus routes:;
//  4. the defaults.
//
// Every layer's values go through the same flag parsing, so a value is
// valid in the file exactly when it is valid on the command line.

// configFile is a parsed --config file.
type configFile struct {
	path   string
	values map[string]string
	routes []routeSpec
}

// routeSpec is one routes: entry (or --route flag).
type routeSpec struct {
	AggregateTypes []string
	EventTypes     []string
	Sink           string
}

// source tells where a flag's effective value came from.
type source string

const (
	fromDefault source = "default"
	fromFile    source = "file"
	fromEnv     source = "env"
	fromFlag    source = "flag"
)

func envName(flagName string) string {
	return "OUTBOXD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// loadConfigFile reads a YAML config. Unknown keys are errors, so a typo
// is caught at start-up rather than silently ignored.
func loadConfigFile(path string, known func(string) bool) (*configFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--config: %v", err)
	}
	var raw map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return nil, usagef("--config %s: %v", path, err)
	}
	cf := &configFile{path: path, values: map[string]string{}}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := raw[k]
		if k == "routes" {
			routes, err := parseRoutes(v)
			if err != nil {
				return nil, usagef("--config %s: routes: %v", path, err)
			}
			cf.routes = routes
			continue
		}
		if !known(k) {
			return nil, usagef("--config %s: unknown key %q", path, k)
		}
		switch v := v.(type) {
		case map[string]any, []any:
			return nil, usagef("--config %s: %s must be a single value", path, k)
		case nil:
			continue
		default:
			cf.values[k] = fmt.Sprint(v)
		}
	}
	return cf, nil
}

func parseRoutes(v any) ([]routeSpec, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, errors.New("want a list of {aggregate_type, event_type, sink}")
	}
	out := make([]routeSpec, 0, len(list))
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("route %d: want a mapping", i+1)
		}
		var r routeSpec
		for k, val := range m {
			switch k {
			case "aggregate_type", "aggregate_types":
				p, err := stringList(val)
				if err != nil {
					return nil, fmt.Errorf("route %d: %s: %w", i+1, k, err)
				}
				r.AggregateTypes = p
			case "event_type", "event_types":
				p, err := stringList(val)
				if err != nil {
					return nil, fmt.Errorf("route %d: %s: %w", i+1, k, err)
				}
				r.EventTypes = p
			case "sink":
				s, ok := val.(string)
				if !ok || s == "" {
					return nil, fmt.Errorf("route %d: sink must be a URL", i+1)
				}
				r.Sink = s
			default:
				return nil, fmt.Errorf("route %d: unknown key %q (want aggregate_type, event_type, sink)", i+1, k)
			}
		}
		if r.Sink == "" {
			return nil, fmt.Errorf("route %d: no sink", i+1)
		}
		out = append(out, r)
	}
	return out, nil
}

func stringList(v any) ([]string, error) {
	switch v := v.(type) {
	case string:
		return []string{v}, nil
	case []any:
		out := make([]string, len(v))
		for i, x := range v {
			s, ok := x.(string)
			if !ok {
				return nil, errors.New("want strings")
			}
			out[i] = s
		}
		return out, nil
	default:
		return nil, errors.New("want a string or a list of strings")
	}
}

// parseRouteFlag parses --route "event_type=Order*,aggregate_type=order=URL":
// filters, then "=" and the sink URL after the last filter. Filter values
// may hold several patterns separated by "|". Its errors never quote the
// value, which holds a URL and maybe its password.
func parseRouteFlag(s string) (routeSpec, error) {
	const want = "want FILTER[,FILTER]=URL with filters aggregate_type or event_type, e.g. event_type=Order*=nats://127.0.0.1:4222?subject=orders"
	var r routeSpec
	rest := s
	for {
		key, after, ok := strings.Cut(rest, "=")
		if !ok {
			return r, errors.New(want)
		}
		value, tail, more := strings.Cut(after, ",")
		if !more || strings.Contains(value, "=") {
			// The last filter: its value runs to the next "=", then the URL.
			v, u, ok := strings.Cut(after, "=")
			if !ok || u == "" {
				return r, errors.New("no sink URL after the filters; " + want)
			}
			value, r.Sink = v, u
			more = false
		}
		patterns := strings.Split(value, "|")
		switch key {
		case "aggregate_type":
			r.AggregateTypes = append(r.AggregateTypes, patterns...)
		case "event_type":
			r.EventTypes = append(r.EventTypes, patterns...)
		default:
			if !isFilterName(key) {
				// Likely a URL written without filters: not shown.
				return r, errors.New(want)
			}
			return r, fmt.Errorf("unknown filter %q; %s", key, want)
		}
		if !more {
			return r, nil
		}
		rest = tail
	}
}

// isFilterName reports whether s looks like a filter name (lower-case
// letters and underscores) rather than part of a URL.
func isFilterName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	return true
}

// routeFlags collects repeated --route flags.
type routeFlags []routeSpec

func (r *routeFlags) String() string { return fmt.Sprint(len(*r)) + " routes" }

func (r *routeFlags) Set(s string) error {
	spec, err := parseRouteFlag(s)
	if err != nil {
		return err
	}
	*r = append(*r, spec)
	return nil
}

// applyLayers fills every flag that the command line did not set from the
// environment, then the file, and returns where each value came from.
func applyLayers(fs *flag.FlagSet, file *configFile, getenv func(string) string) (map[string]source, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	sources := map[string]source{}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || f.Name == "config" || f.Name == connectFlag {
			return
		}
		switch {
		case set[f.Name]:
			sources[f.Name] = fromFlag
		case getenv(envName(f.Name)) != "":
			if e := fs.Set(f.Name, getenv(envName(f.Name))); e != nil {
				err = usagef("%s: %v", envName(f.Name), e)
			}
			sources[f.Name] = fromEnv
		case f.Name == "dsn" && getenv("OUTBOX_DSN") != "":
			sources[f.Name] = fromEnv // resolveDSN reads it
		case file != nil && file.values[f.Name] != "":
			if e := fs.Set(f.Name, file.values[f.Name]); e != nil {
				err = usagef("--config %s: %s: %v", file.path, f.Name, e)
			}
			sources[f.Name] = fromFile
		default:
			sources[f.Name] = fromDefault
		}
	})
	return sources, err
}

// maskSecret hides secrets in a value for display: whole values of secret
// flags, the password settings of the DSN (parsed, never echoed when it does
// not parse) and the userinfo of sink URLs.
func maskSecret(name, value string) string {
	switch {
	case value == "":
		return value
	case sinkutil.IsSecretKey(name):
		return "*****"
	case name == "dsn":
		return redactDSN(value)
	case name == "sink" || strings.Contains(value, "://"):
		return sinkutil.RedactURL(value)
	}
	return value
}

// parseLayered parses a command's flags, then fills those not given from
// OUTBOXD_* variables and the --config file, as run does. Keys of the file
// that this command does not have are ignored: one file serves every
// command (run validates it strictly).
func parseLayered(e *env, fs *flag.FlagSet, db *dbFlags, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path := db.config
	if path == "" {
		path = e.getenv("OUTBOXD_CONFIG")
	}
	var file *configFile
	if path != "" {
		f, err := loadConfigFile(path, func(string) bool { return true })
		if err != nil {
			return err
		}
		for k := range f.values {
			if k == "config" || fs.Lookup(k) == nil {
				delete(f.values, k)
			}
		}
		file = f
	}
	_, err := applyLayers(fs, file, e.getenv)
	return err
}
