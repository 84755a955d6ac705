package cli

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// pipelineSpec is one entry of a config file's pipelines: list: a table
// (or a pattern of tables) relayed with the top level's settings, its own
// keys overriding them.
type pipelineSpec struct {
	name  string
	table string
	line  int
	// values are its settings by flag name, lines their lines in the file.
	values map[string]string
	lines  map[string]int
	// routes are its own routes; hasRoutes tells an empty list (no routes:
	// every message to its sink) from none given (the top level's).
	routes    []routeSpec
	hasRoutes bool
}

// processKeys are settings of the whole process, not of one pipeline.
var processKeys = map[string]bool{
	"config": true, "metrics-addr": true, "console-addr": true, "console-write": true, "console-allow-host": true,
	"tls-cert": true, "tls-key": true, "behind-tls-proxy": true,
	"log-level": true, "log-format": true, "drain": true, "discover-interval": true,
}

var pipelineName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// parsePipelines reads a pipelines: list from its YAML node; known tells a
// setting of run.
func parsePipelines(node *yaml.Node, known func(string) bool) ([]pipelineSpec, error) {
	if node.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: pipelines: want a list of {name, table, dsn, sink, ...}", node.Line)
	}
	if len(node.Content) == 0 {
		return nil, fmt.Errorf("line %d: pipelines: the list is empty", node.Line)
	}
	names := map[string]int{}
	out := make([]pipelineSpec, 0, len(node.Content))
	for i, item := range node.Content {
		p, err := parsePipeline(item, known)
		if err != nil {
			return nil, fmt.Errorf("line %d: pipeline %d: %w", item.Line, i+1, err)
		}
		if first, dup := names[p.name]; dup {
			return nil, fmt.Errorf("line %d: pipeline %d: name %q is taken by the pipeline at line %d", item.Line, i+1, p.name, first)
		}
		names[p.name] = item.Line
		out = append(out, p)
	}
	return out, nil
}

func parsePipeline(item *yaml.Node, known func(string) bool) (pipelineSpec, error) {
	p := pipelineSpec{line: item.Line, values: map[string]string{}, lines: map[string]int{}}
	if item.Kind != yaml.MappingNode {
		return p, errors.New("want a mapping of name, table and run's settings")
	}
	for j := 0; j+1 < len(item.Content); j += 2 {
		k, v := item.Content[j], item.Content[j+1]
		key := k.Value
		if _, dup := p.lines[key]; dup {
			return p, fmt.Errorf("%s given twice (line %d)", key, k.Line)
		}
		p.lines[key] = k.Line
		switch {
		case key == "name":
			p.name = v.Value
			if v.Kind != yaml.ScalarNode || !pipelineName.MatchString(p.name) {
				return p, fmt.Errorf("name: want 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit")
			}
		case key == "table":
			if v.Kind != yaml.ScalarNode || strings.TrimSpace(v.Value) == "" {
				return p, errors.New("table: want NAME, SCHEMA.NAME or a pattern with * such as tenant_*.outbox")
			}
			p.table = v.Value
		case key == "routes":
			var raw any
			if err := v.Decode(&raw); err != nil {
				return p, fmt.Errorf("routes: %w", err)
			}
			var lines []int
			for _, r := range v.Content {
				lines = append(lines, r.Line)
			}
			routes, err := parseRoutes(raw, lines)
			if err != nil {
				return p, fmt.Errorf("routes: %w", err)
			}
			p.routes, p.hasRoutes = routes, true
		case processKeys[key]:
			return p, fmt.Errorf("%s is a setting of the whole process: give it at the top level", key)
		case !known(key):
			return p, fmt.Errorf("unknown key %q (line %d)", key, k.Line)
		case v.Kind != yaml.ScalarNode:
			return p, fmt.Errorf("%s must be a single value", key)
		default:
			if v.Tag != "!!null" {
				p.values[key] = v.Value
			}
		}
	}
	if p.name == "" {
		return p, errors.New("no name")
	}
	if p.table == "" {
		return p, fmt.Errorf("pipeline %q: no table", p.name)
	}
	if _, _, err := splitTablePattern(p.table); err != nil {
		return p, fmt.Errorf("pipeline %q: table: %w", p.name, err)
	}
	return p, nil
}

// splitTablePattern splits NAME, SCHEMA.NAME or a pattern of either into
// its schema ("" for the search path's) and name.
func splitTablePattern(t string) (schema, name string, err error) {
	parts := strings.Split(t, ".")
	switch {
	case len(parts) == 1:
		name = parts[0]
	case len(parts) == 2:
		schema, name = parts[0], parts[1]
	default:
		return "", "", fmt.Errorf("%q: want NAME, SCHEMA.NAME or a pattern of either", t)
	}
	if name == "" || len(parts) == 2 && schema == "" {
		return "", "", fmt.Errorf("%q: want NAME, SCHEMA.NAME or a pattern of either", t)
	}
	return schema, name, nil
}

// isPattern reports whether a pipeline's table names several tables.
func isPattern(table string) bool { return strings.Contains(table, "*") }
