package cli

import (
	"context"
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(&metrics.Options{Registerer: reg, Gatherer: reg, Table: s.db.table, Sink: scheme, Logger: logger})
	cfg.Hook = m.Hook()
	admin, err := outbox.NewAdmin(pool, s.db.table)
	if err != nil {
		return nil, nil, err
	}
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
		if err := m.Serve(ctx, s.metricsAddr); err != nil {
			logger.Error("metrics server stopped", slog.Any("error", err))
		}
	}()
	logger.Info("serving metrics", slog.String("addr", s.metricsAddr))
	return m, func() { cancel(); stopRefresher(); <-done }, nil
}
