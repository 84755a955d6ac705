package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	flag "github.com/spf13/pflag"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/route"
	"github.com/outboxd/outbox/sink/sinkutil"
)

func runConfig(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(e.stdout, "Usage: outboxd config check [--connect] [--config FILE] [run flags]")
			return nil
		}
		return usagef("config: want a subcommand: check")
	}
	s := newRunSetup(e, "config check", "config check [--connect] [--config FILE] [run flags]")
	connect := s.fs.Bool(connectFlag, false, "also connect: check the database, the table, the role's grants and every sink")
	if err := s.parse(e, args[1:]); err != nil {
		return err
	}
	if _, err := s.lf.logger(e.stderr); err != nil {
		return err
	}
	if err := s.tlsListeners(); err != nil {
		return err
	}
	if err := s.tls.loads(); err != nil {
		return err
	}
	if len(s.pipelines) > 0 {
		return checkPipelineConfig(ctx, e, s, args[1:], *connect)
	}
	cfg, err := s.rf.config(s.db.table, nil)
	if err != nil {
		return err
	}
	if err := s.checkSinks(); err != nil {
		return err
	}
	if s.db.config != "" {
		fmt.Fprintf(e.stdout, "config file: %s\n", s.db.config)
	}
	if err := s.printSettings(e, cfg.WithDefaults()); err != nil {
		return err
	}
	s.printRoutes(e.stdout)
	fmt.Fprintln(e.stdout, "configuration is valid")
	if *connect {
		return runConnectChecks(ctx, e, s)
	}
	return nil
}

// checkSinks checks the default sink's URL and the routes', and that the
// routes make a router, without building any sink.
func (s *runSetup) checkSinks() error {
	if s.hasDefaultSink() {
		if err := checkSinkURL(s.rf.sink); err != nil {
			return err
		}
	}
	var rs []route.Route
	for _, r := range s.allRoutes() {
		if err := checkSinkURL(r.Sink); err != nil {
			return err
		}
		rs = append(rs, route.Route{Name: sinkutil.RedactURL(r.Sink), AggregateTypes: r.AggregateTypes, EventTypes: r.EventTypes, Sink: nullSink(), Limits: r.limits()})
	}
	router, err := route.New(rs, nil)
	if err != nil {
		return usagef("routes: %v", err)
	}
	if len(rs) == 0 {
		router = nil
	}
	_, err = s.flow(router)
	return err
}

// printSettings writes each setting, its effective value (secrets masked)
// and where the value came from.
// With show, only the settings it accepts.
func (s *runSetup) printSettings(e *env, effective *outbox.Config, show ...func(name string) bool) error {
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SETTING\tVALUE\tFROM")
	s.fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || f.Name == "route" || f.Name == connectFlag || len(show) > 0 && !show[0](f.Name) {
			return
		}
		value := maskSecret(f.Name, f.Value.String())
		if f.Name == "dsn" && value == "" && e.getenv("OUTBOX_DSN") != "" {
			value = maskSecret(f.Name, e.getenv("OUTBOX_DSN"))
		}
		if f.Name == "dsn" && value == "" {
			value = "(libpq environment)"
		}
		if f.Name == "publish-timeout" && s.sources[f.Name] == fromDefault && effective != nil {
			value = effective.PublishTimeout.String() // derived from the lease
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", f.Name, value, s.sources[f.Name])
	})
	return w.Flush()
}

// printRoutes writes the routes, in order, and the default sink.
func (s *runSetup) printRoutes(out io.Writer) {
	routes := s.allRoutes()
	if len(routes) == 0 {
		return
	}
	fmt.Fprintln(out, "routes (first match wins):")
	for i, r := range routes {
		name := r.Name
		if name == "" {
			name = fmt.Sprintf("route-%d", i+1)
		}
		fmt.Fprintf(out, "  %d. %s: aggregate_type=%s event_type=%s -> %s%s\n", i+1, name,
			patterns(r.AggregateTypes), patterns(r.EventTypes), maskSecret("sink", r.Sink), limitsText(r.limits()))
	}
	if s.hasDefaultSink() {
		def, _ := s.limits.destination()
		fmt.Fprintf(out, "  default -> %s%s\n", maskSecret("sink", s.rf.sink), limitsText(def))
	} else {
		fmt.Fprintln(out, "  default: none (run refuses to start while waiting messages match no route; later ones go dead)")
	}
}

// connectFlag is config check's own flag: not a setting, so it is neither
// read from the file or the environment nor listed.
const connectFlag = "connect"

func patterns(p []string) string {
	if len(p) == 0 {
		return "*"
	}
	return strings.Join(p, "|")
}

// checkSinkURL validates a sink URL without connecting anywhere.
func checkSinkURL(raw string) error {
	scheme, err := parseSinkURL(raw)
	if err != nil {
		return err
	}
	if check := sinkKinds[scheme].check; check != nil {
		if err := check(bareScheme(raw)); err != nil {
			return usagef("sink %s: %v", sinkutil.RedactURL(raw), err)
		}
	}
	return nil
}

// limitsText is a destination's limits for config check, "" without.
func limitsText(d outbox.Destination) string {
	var parts []string
	if d.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %g/s", d.Rate), fmt.Sprintf("burst %d", max(d.Burst, 1)))
	}
	if d.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", d.Concurrency))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
