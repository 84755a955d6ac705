package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	flag "github.com/spf13/pflag"
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
	// lines are the line of each key in the file, for errors.
	lines  map[string]int
	routes []routeSpec
	// pipelines are the file's pipelines: list (none: one table, run's
	// --table).
	pipelines []pipelineSpec
}

// routeSpec is one routes: entry (or --route flag).
type routeSpec struct {
	AggregateTypes []string
	EventTypes     []string
	Sink           string
	// Name names the route's destination (its limits; default route-N);
	// Rate (a second), Burst and Concurrency are its limits.
	Name        string
	Rate        float64
	Burst       int
	Concurrency int
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
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, usagef("--config %s: %v", path, err)
	}
	var raw map[string]any
	if err := doc.Decode(&raw); err != nil {
		return nil, usagef("--config %s: %v", path, err)
	}
	lines, routeLines := keyLines(&doc)
	cf := &configFile{path: path, values: map[string]string{}, lines: lines}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		v := raw[k]
		if k == "pipelines" {
			pipes, err := parsePipelines(topNode(&doc, k), known)
			if err != nil {
				return nil, usagef("--config %s: %v", path, err)
			}
			cf.pipelines = pipes
			continue
		}
		if k == "routes" {
			routes, err := parseRoutes(v, routeLines)
			if err != nil {
				return nil, usagef("--config %s: line %d: routes: %v", path, lines[k], err)
			}
			cf.routes = routes
			continue
		}
		if !known(k) {
			return nil, usagef("--config %s: line %d: unknown key %q", path, lines[k], k)
		}
		switch v := v.(type) {
		case map[string]any, []any:
			return nil, usagef("--config %s: line %d: %s must be a single value", path, lines[k], k)
		case nil:
			continue
		default:
			cf.values[k] = fmt.Sprint(v)
		}
	}
	return cf, nil
}

// keyLines returns the line of each top-level key of a YAML document, and
// the line of each entry of its routes: list.
func keyLines(doc *yaml.Node) (keys map[string]int, routes []int) {
	keys = map[string]int{}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return keys, nil
	}
	m := doc.Content[0].Content
	for i := 0; i+1 < len(m); i += 2 {
		keys[m[i].Value] = m[i].Line
		if m[i].Value == "routes" && m[i+1].Kind == yaml.SequenceNode {
			for _, item := range m[i+1].Content {
				routes = append(routes, item.Line)
			}
		}
	}
	return keys, routes
}

// topNode is the value of a top-level key of a YAML document (the key
// is known to be there).
func topNode(doc *yaml.Node, key string) *yaml.Node {
	m := doc.Content[0].Content
	for i := 0; i+1 < len(m); i += 2 {
		if m[i].Value == key {
			return m[i+1]
		}
	}
	return nil
}

// parseRoutes reads a routes: list; lines, when known, are each entry's
// line in the file, for errors.
func parseRoutes(v any, lines []int) ([]routeSpec, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, errors.New("want a list of {aggregate_type, event_type, sink}")
	}
	out := make([]routeSpec, 0, len(list))
	for i, item := range list {
		r, err := parseRoute(item)
		if err != nil {
			if i < len(lines) {
				return nil, fmt.Errorf("route %d (line %d): %w", i+1, lines[i], err)
			}
			return nil, fmt.Errorf("route %d: %w", i+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// parseRoute reads one routes: entry.
func parseRoute(item any) (routeSpec, error) {
	var r routeSpec
	m, ok := item.(map[string]any)
	if !ok {
		return r, errors.New("want a mapping")
	}
	for k, val := range m {
		switch k {
		case "aggregate_type", "aggregate_types":
			p, err := stringList(val)
			if err != nil {
				return r, fmt.Errorf("%s: %w", k, err)
			}
			r.AggregateTypes = p
		case "event_type", "event_types":
			p, err := stringList(val)
			if err != nil {
				return r, fmt.Errorf("%s: %w", k, err)
			}
			r.EventTypes = p
		case "sink":
			s, ok := val.(string)
			if !ok || s == "" {
				return r, errors.New("sink must be a URL")
			}
			r.Sink = s
		default:
			known, err := r.setLimit(k, fmt.Sprint(val))
			if !known {
				return r, fmt.Errorf("unknown key %q (want aggregate_type, event_type, sink, name, rate, burst, concurrency)", k)
			}
			if err != nil {
				return r, err
			}
		}
	}
	if r.Sink == "" {
		return r, errors.New("no sink")
	}
	return r, nil
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
	const want = "want FILTER[,FILTER]=URL with filters aggregate_type or event_type and options name, rate, burst, concurrency, e.g. event_type=Order*=nats://127.0.0.1:4222?subject=orders"
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
			if known, err := r.setLimit(key, value); known {
				if err != nil {
					return r, err
				}
				break
			}
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

func (r *routeFlags) Type() string { return "ROUTE" }

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
			if e := setFlag(fs, f.Name, getenv(envName(f.Name))); e != nil {
				err = usagef("%s: %v", envName(f.Name), e)
			}
			sources[f.Name] = fromEnv
		case f.Name == "dsn" && getenv("OUTBOX_DSN") != "":
			sources[f.Name] = fromEnv // resolveDSN reads it
		case file != nil && file.values[f.Name] != "":
			if e := setFlag(fs, f.Name, file.values[f.Name]); e != nil {
				err = usagef("--config %s: line %d: %s: %v", file.path, file.lines[f.Name], f.Name, e)
			}
			sources[f.Name] = fromFile
		default:
			sources[f.Name] = fromDefault
		}
	})
	return sources, err
}

// setFlag sets a flag from another layer. Its error is the value's own,
// without the raw value pflag quotes around it: the value may be a secret.
func setFlag(fs *flag.FlagSet, name, value string) error {
	err := fs.Set(name, value)
	if ive := (*flag.InvalidValueError)(nil); errors.As(err, &ive) {
		return ive.Unwrap()
	}
	return err
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
	markLayered(fs)
	if err := parseFlags(e, fs, args); err != nil {
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
	sources, err := applyLayers(fs, file, e.getenv)
	if err != nil {
		return err
	}
	if file != nil && len(file.pipelines) > 0 {
		db.config, db.pipelines, db.tableGiven = path, file.pipelines, sources["table"] != fromDefault
	}
	return nil
}
