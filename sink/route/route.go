// Package route sends each message to the sink its aggregate type and event
// type select, so one relay can feed several destinations.
package route

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/outboxd/outbox"
)

// Route sends matching messages to Sink. Patterns use path.Match syntax
// ("Order*", "order", "*"); an empty list matches everything. A message
// matches when its aggregate_type matches one of AggregateTypes and its
// event_type one of EventTypes.
type Route struct {
	// Name identifies the route in errors and logs (e.g. its sink URL,
	// redacted).
	Name           string
	AggregateTypes []string
	EventTypes     []string
	Sink           outbox.Sink
	// Limits bound what goes to Sink (its Name is the destination's:
	// routes of one name share their limits; empty: "route-N", N its
	// position from 1). They are kept when the router is the
	// dispatcher's [outbox.Config.Flow].
	Limits outbox.Destination
}

// DefaultDestination names the messages that match no route.
const DefaultDestination = outbox.DefaultDestination

// Router is a [outbox.Sink] that publishes each message to the first route
// that matches it, else to the default sink. It is also the
// [outbox.Destinations] of its routes' limits.
type Router struct {
	routes []Route
	def    outbox.Sink
	defLim outbox.Destination
}

// New returns a router over routes, tried in order, with def for messages
// that match none (nil: no default, and such a message goes dead as a
// configuration error).
func New(routes []Route, def outbox.Sink) (*Router, error) {
	routes = append([]Route(nil), routes...)
	byName := map[string]outbox.Destination{}
	for i, r := range routes {
		if r.Sink == nil {
			return nil, fmt.Errorf("route %d (%s): no sink", i+1, r.Name)
		}
		if routes[i].Limits.Name == "" {
			routes[i].Limits.Name = fmt.Sprintf("route-%d", i+1)
		}
		if err := routes[i].Limits.Validate(); err != nil {
			return nil, fmt.Errorf("route %d (%s): %w", i+1, r.Name, err)
		}
		// Routes of one name are one destination: one set of limits.
		if prev, ok := byName[routes[i].Limits.Name]; ok && prev != routes[i].Limits {
			return nil, fmt.Errorf("route %d (%s): destination %q is given other limits by an earlier route", i+1, r.Name, prev.Name)
		}
		byName[routes[i].Limits.Name] = routes[i].Limits
		for _, p := range append(append([]string(nil), r.AggregateTypes...), r.EventTypes...) {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("route %d (%s): bad pattern %q: %w", i+1, r.Name, p, err)
			}
		}
	}
	return &Router{routes: routes, def: def, defLim: outbox.Destination{Name: DefaultDestination}}, nil
}

// LimitDefault sets the limits of the messages that match no route (its
// Name is DefaultDestination unless set).
func (r *Router) LimitDefault(d outbox.Destination) error {
	if d.Name == "" {
		d.Name = DefaultDestination
	}
	if err := d.Validate(); err != nil {
		return err
	}
	for _, rt := range r.routes {
		if rt.Limits.Name == d.Name && rt.Limits != d {
			return fmt.Errorf("destination %q is a route's, with other limits", d.Name)
		}
	}
	r.defLim = d
	return nil
}

// Limited reports whether a route or the default has a limit: whether
// the router is worth being the dispatcher's Config.Flow.
func (r *Router) Limited() bool {
	for _, rt := range r.routes {
		if rt.Limits.Limited() {
			return true
		}
	}
	return r.defLim.Limited()
}

// Destination is the destination msg's route names, with its limits.
func (r *Router) Destination(msg *outbox.Message) outbox.Destination {
	for _, rt := range r.routes {
		if matchAny(rt.AggregateTypes, msg.AggregateType) && matchAny(rt.EventTypes, msg.EventType) {
			return rt.Limits
		}
	}
	return r.defLim
}

// Routes is how many routes the router has: with any, the dispatcher keeps
// a breaker per destination (a route's sink down holds back only its own
// messages).
func (r *Router) Routes() int { return len(r.routes) }

// HasDefault reports whether messages that match no route have a sink.
func (r *Router) HasDefault() bool { return r.def != nil }

// Match returns the sink for a message of these types, or nil.
func (r *Router) Match(aggregateType, eventType string) outbox.Sink {
	for _, rt := range r.routes {
		if matchAny(rt.AggregateTypes, aggregateType) && matchAny(rt.EventTypes, eventType) {
			return rt.Sink
		}
	}
	return r.def
}

func matchAny(patterns []string, s string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

// ErrNoRoute is wrapped by the error for a message no route matches.
var ErrNoRoute = errors.New("no route matches")

// Publish publishes msg to its route's sink. A message that matches no
// route and has no default is a configuration error: Permanent, so it goes
// dead where an operator sees it, rather than being dropped.
func (r *Router) Publish(ctx context.Context, msg *outbox.Message) error {
	s := r.Match(msg.AggregateType, msg.EventType)
	if s == nil {
		return outbox.Permanent(fmt.Errorf("%w aggregate_type %q, event_type %q", ErrNoRoute, msg.AggregateType, msg.EventType))
	}
	return s.Publish(ctx, msg)
}

// Unrouted returns the (aggregate_type, event_type) pairs among types that
// no route matches when there is no default: what start-up checks report.
func (r *Router) Unrouted(types [][2]string) [][2]string {
	if r.def != nil {
		return nil
	}
	var out [][2]string
	for _, t := range types {
		if r.Match(t[0], t[1]) == nil {
			out = append(out, t)
		}
	}
	return out
}

// Close closes every distinct sink once.
func (r *Router) Close() error {
	seen := map[outbox.Sink]bool{}
	var errs []error
	closeOnce := func(s outbox.Sink) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, rt := range r.routes {
		closeOnce(rt.Sink)
	}
	closeOnce(r.def)
	return errors.Join(errs...)
}

// String describes the routes, for logs.
func (r *Router) String() string {
	var b strings.Builder
	for i, rt := range r.routes {
		fmt.Fprintf(&b, "%d: aggregate_type=%s event_type=%s -> %s; ", i+1, list(rt.AggregateTypes), list(rt.EventTypes), rt.Name)
	}
	if r.def == nil {
		b.WriteString("default: none")
	} else {
		b.WriteString("default: yes")
	}
	return b.String()
}

func list(p []string) string {
	if len(p) == 0 {
		return "*"
	}
	return strings.Join(p, "|")
}
