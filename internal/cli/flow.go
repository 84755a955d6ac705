package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/route"
)

// parseRate reads a rate, N messages a second or N/s, N/m, N/h (N may
// have a fraction): messages a second.
func parseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), "/")
	per := 1.0
	switch strings.TrimSpace(unit) {
	case "", "s":
	case "m":
		per = 60
	case "h":
		per = 3600
	default:
		return 0, fmt.Errorf("rate %q: want N, N/s, N/m or N/h (messages a second, a minute, an hour)", s)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n < 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("rate %q: want N, N/s, N/m or N/h with N a number of messages, 0 or more", s)
	}
	return n / per, nil
}

// rateValue is a flag holding a rate (parseRate), shown as given.
type rateValue struct {
	text string
	per  float64 // a second
}

func (r *rateValue) String() string { return r.text }

func (r *rateValue) Type() string { return "RATE" }

func (r *rateValue) Set(s string) error {
	v, err := parseRate(s)
	if err != nil {
		return err
	}
	r.text, r.per = s, v
	return nil
}

// sinkLimits are --sink-rate, --sink-burst and --sink-concurrency: the
// limits of the default sink (the whole table without routes).
type sinkLimits struct {
	rate        rateValue
	burst       int
	concurrency int
}

// destination is the default sink's limits, checked.
func (l *sinkLimits) destination() (outbox.Destination, error) {
	d := outbox.Destination{Name: route.DefaultDestination, Rate: l.rate.per, Burst: l.burst, Concurrency: l.concurrency}
	if err := d.Validate(); err != nil {
		return d, usagef("--sink-rate, --sink-burst, --sink-concurrency: %v", err)
	}
	return d, nil
}

// flow is the dispatcher's Config.Flow for the sinks opened: the router
// when a route or the default is limited, the default sink's limits when
// there is no router, nil without limits.
func (s *runSetup) flow(router *route.Router) (outbox.Destinations, error) {
	def, err := s.limits.destination()
	if err != nil {
		return nil, err
	}
	if router == nil {
		if !def.Limited() {
			return nil, nil
		}
		return outbox.OneDestination(def), nil
	}
	if err := router.LimitDefault(def); err != nil {
		return nil, usagef("--sink-rate: %v", err)
	}
	// Without limits the router still names each message's destination,
	// for the pauses (a route's name).
	return router, nil
}

// routeLimits reads a route's name, rate, burst or concurrency (a key of
// the file's route or an option of --route); known is false for another
// key.
func (r *routeSpec) setLimit(key, value string) (known bool, err error) {
	switch key {
	case "name":
		if value == "" {
			return true, fmt.Errorf("name: empty")
		}
		r.Name = value
	case "rate":
		r.Rate, err = parseRate(value)
	case "burst", "concurrency":
		n, perr := strconv.Atoi(strings.TrimSpace(value))
		if perr != nil || n < 0 {
			return true, fmt.Errorf("%s %q: want a whole number, 0 or more", key, value)
		}
		if key == "burst" {
			r.Burst = n
		} else {
			r.Concurrency = n
		}
	default:
		return false, nil
	}
	return true, err
}

// limits is the route's destination.
func (r *routeSpec) limits() outbox.Destination {
	return outbox.Destination{Name: r.Name, Rate: r.Rate, Burst: r.Burst, Concurrency: r.Concurrency}
}
