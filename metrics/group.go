package metrics

import (
	"context"
	"crypto/tls"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Group serves the metrics of several dispatchers, each a [Metrics] with
// its Pipeline label, registered on one registry: one /metrics for all,
// one /healthz, and one /readyz that is ready when every member is and
// otherwise names each member that is not and why.
type Group struct {
	gatherer prometheus.Gatherer
	log      *slog.Logger

	mu      sync.Mutex
	members map[string]*Metrics
}

// NewGroup returns an empty group serving what g gathers.
func NewGroup(g prometheus.Gatherer, logger *slog.Logger) *Group {
	if logger == nil {
		logger = slog.Default()
	}
	return &Group{gatherer: g, log: logger.With(slog.String("component", "metrics")), members: map[string]*Metrics{}}
}

// Add makes m, named name, a member: its readiness counts from now on.
func (g *Group) Add(name string, m *Metrics) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.members[name] = m
}

// Remove drops the member named name.
func (g *Group) Remove(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.members, name)
}

// Ready reports whether every member is ready; if not, the members that
// are not, each with its reason, in name order. A group with no member is
// not ready.
func (g *Group) Ready() (bool, string) {
	g.mu.Lock()
	members := maps.Clone(g.members)
	g.mu.Unlock()
	if len(members) == 0 {
		return false, "no pipeline running"
	}
	var not []string
	for _, name := range slices.Sorted(maps.Keys(members)) {
		if ok, reason := members[name].Ready(); !ok {
			not = append(not, name+": "+reason)
		}
	}
	if len(not) > 0 {
		return false, strings.Join(not, "; ")
	}
	return true, "ok"
}

// Handler serves /metrics, /healthz and /readyz as [Metrics.Handler] does,
// for the whole group.
func (g *Group) Handler() http.Handler { return handler(g.gatherer, g.Ready) }

// Serve serves Handler on addr as [Metrics.Serve] does.
func (g *Group) Serve(ctx context.Context, addr string) error {
	return serve(ctx, addr, g.Handler(), g.log, nil)
}

// ServeTLS serves Handler on addr over TLS as [Metrics.ServeTLS] does.
func (g *Group) ServeTLS(ctx context.Context, addr string, tc *tls.Config) error {
	return serve(ctx, addr, g.Handler(), g.log, tc)
}
