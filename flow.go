package outbox

import (
	"fmt"
	"math"
)

// Destination is where a message goes and how gently: a receiver that
// takes 50 requests a second, a cluster that takes two publishes at once.
// Its limits hold over all the table's dispatchers together: each running
// dispatcher takes an even share of them (see [Config.Flow]).
type Destination struct {
	// Name identifies the destination (a route's name, "default"):
	// messages of one name share its limits.
	Name string
	// Rate is how many messages a second it is sent at most; 0: no limit.
	Rate float64
	// Burst is how many may go at once after a quiet spell, on top of the
	// rate; 0 is 1 (paced evenly).
	Burst int
	// Concurrency is how many publishes may be in flight to it at once;
	// 0: no limit.
	Concurrency int
}

// DefaultDestination is the name of the destination of a message no
// route names: the default sink's.
const DefaultDestination = "default"

// Limited reports whether d has a limit.
func (d Destination) Limited() bool { return d.Rate > 0 || d.Concurrency > 0 }

// Validate reports a limit out of range, naming it.
func (d Destination) Validate() error {
	switch {
	case d.Rate < 0 || math.IsNaN(d.Rate) || math.IsInf(d.Rate, 0):
		return fmt.Errorf("destination %q: rate must be a positive number of messages a second or 0, got %v", d.Name, d.Rate)
	case d.Rate > MaxDestinationRate:
		return fmt.Errorf("destination %q: rate %v is over %v a second", d.Name, d.Rate, MaxDestinationRate)
	case d.Rate > 0 && d.Rate < MinDestinationRate:
		return fmt.Errorf("destination %q: rate %v is under %v a second (one an hour)", d.Name, d.Rate, MinDestinationRate)
	case d.Burst < 0:
		return fmt.Errorf("destination %q: burst must not be negative, got %d", d.Name, d.Burst)
	case d.Burst > 0 && d.Rate == 0:
		return fmt.Errorf("destination %q: burst without a rate", d.Name)
	case d.Concurrency < 0:
		return fmt.Errorf("destination %q: concurrency must not be negative, got %d", d.Name, d.Concurrency)
	}
	return nil
}

// Bounds of [Destination.Rate].
const (
	MinDestinationRate = 1.0 / 3600
	MaxDestinationRate = 1e6
)

// Destinations names each message's destination, so that the dispatcher
// keeps each one's limits without one slow destination holding back the
// others ([Config.Flow]). route.Router is one; [OneDestination] makes one
// of a whole table.
type Destinations interface {
	Destination(msg *Message) Destination
}

// OneDestination is every message to d: the limits of a table relayed to
// one sink.
func OneDestination(d Destination) Destinations { return oneDestination(d) }

type oneDestination Destination

// flowInvalid is the error of a Config.Flow that can be checked ahead (a
// OneDestination's limits).
func flowInvalid(f Destinations) error {
	if o, ok := f.(oneDestination); ok {
		return Destination(o).Validate()
	}
	return nil
}

func (o oneDestination) Destination(*Message) Destination { return Destination(o) }

// limited reports whether f may name a destination with a limit: false
// only for one that says it has none (route.Router without limits), which
// then names destinations for pauses alone, at no cost per message.
func limited(f Destinations) bool {
	if l, ok := f.(interface{ Limited() bool }); ok {
		return l.Limited()
	}
	return true
}
