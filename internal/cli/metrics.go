package cli

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/metrics"
)

// startMetrics serves the Prometheus endpoints for the run and feeds them
// from the dispatcher's hook and a periodic gauge query. A metrics address
// that cannot be bound stops the run at once: an operator who asked for
// metrics must not get a relay nobody can see.
func (s *runSetup) startMetrics(ctx context.Context, pool *pgxpool.Pool, cfg *outbox.Config, logger *slog.Logger) (*metrics.Metrics, func(), error) {
	scheme, _ := parseSinkURL(s.rf.sink)
	if len(s.allRoutes()) > 0 {
		scheme = "routes"
	}
	admin, err := outbox.NewAdmin(pool, s.db.table)
	if err != nil {
		return nil, nil, err
	}
	if g := s.group; g != nil {
		// A pipeline's table: its series go to the daemon's registry,
		// labelled with the pipeline, and leave with it.
		m := metrics.New(&metrics.Options{Registerer: g.reg, Gatherer: g.reg, Table: s.db.table, Sink: scheme, Pipeline: g.pipeline, Logger: logger})
		cfg.Hook = m.Hook()
		stopRefresher := m.StartRefresher(ctx, admin, 0)
		g.group.Add(g.name, m)
		return m, func() { stopRefresher(); g.group.Remove(g.name); m.Unregister(g.reg) }, nil
	}
	reg := newProcessRegistry()
	m := metrics.New(&metrics.Options{Registerer: reg, Gatherer: reg, Table: s.db.table, Sink: scheme, Logger: logger})
	cfg.Hook = m.Hook()
	ln, err := net.Listen("tcp", s.metricsAddr)
	if err != nil {
		return nil, nil, usagef("--metrics-addr: cannot listen on %s: %v", s.metricsAddr, err)
	}
	_ = ln.Close() // Serve binds it again; this only reports a bad address early
	ctx, cancel := context.WithCancel(ctx)
	stopRefresher := m.StartRefresher(ctx, admin, 0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.ServeTLS(ctx, s.metricsAddr, s.tc); err != nil {
			logger.Error("metrics server stopped", slog.Any("error", err))
		}
	}()
	logger.Info("serving metrics", slog.String("addr", s.metricsAddr))
	return m, func() { cancel(); stopRefresher(); <-done }, nil
}

// newProcessRegistry is a registry holding the Go runtime's and the
// process's collectors.
func newProcessRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// pipelineMetrics is where the metrics of a pipeline's table go when the
// daemon serves metrics: the daemon's registry, labelled with the
// pipeline (and the table), and its group, as name (the pipeline's, and
// for a pattern's table its SCHEMA.NAME too).
type pipelineMetrics struct {
	reg      *prometheus.Registry
	group    *metrics.Group
	pipeline string
	name     string
}

// serveGroup serves the pipelines' metrics on --metrics-addr until ctx
// ends; a bad address stops the daemon at once.
func serveGroup(ctx context.Context, addr string, tc *tls.Config, logger *slog.Logger) (*prometheus.Registry, *metrics.Group, func(), error) {
	reg := newProcessRegistry()
	g := metrics.NewGroup(reg, logger)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, nil, usagef("--metrics-addr: cannot listen on %s: %v", addr, err)
	}
	_ = ln.Close()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.ServeTLS(ctx, addr, tc); err != nil {
			logger.Error("metrics server stopped", slog.Any("error", err))
		}
	}()
	logger.Info("serving metrics", slog.String("addr", addr))
	return reg, g, func() { cancel(); <-done }, nil
}
