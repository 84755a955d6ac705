package outbox

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// DestinationReport is what one dispatcher reported of a limited
// destination with its last beat (see [DestinationState]).
type DestinationReport struct {
	Name        string  `json:"name"`
	Rate        float64 `json:"rate"`
	Burst       int     `json:"burst"`
	Concurrency int     `json:"concurrency"`
	// RateShare and ConcurrencyShare are the dispatcher's share of the
	// limits.
	RateShare        float64 `json:"rate_share"`
	ConcurrencyShare int     `json:"concurrency_share"`
	InFlight         int     `json:"in_flight"`
	// Waiting are the messages handed back for want of budget that are not
	// due yet; HandedBack counts them since the dispatcher started, and
	// HeldSeconds adds up the delays they were given (over HandedBack, the
	// mean wait for budget).
	Waiting     int     `json:"waiting"`
	HandedBack  int64   `json:"handed_back"`
	HeldSeconds float64 `json:"held_seconds"`
	// Unavailable is whether its sink said it is unavailable: its
	// messages wait for a probe ([DestinationState.Unavailable]).
	Unavailable bool `json:"unavailable"`
}

// flowReport is what a dispatcher writes with its beat.
type flowReport struct {
	SinkPaused   bool                `json:"sink_paused"`
	Destinations []DestinationReport `json:"destinations"`
}

func reportOf(states []DestinationState) []DestinationReport {
	out := make([]DestinationReport, len(states))
	for i, s := range states {
		out[i] = DestinationReport{
			Name: s.Name, Rate: s.Rate, Burst: s.Burst, Concurrency: s.Concurrency,
			RateShare: s.RateShare, ConcurrencyShare: s.ConcurrencyShare, InFlight: s.InFlight,
			Waiting: s.Waiting, HandedBack: s.HandedBack, HeldSeconds: s.HeldFor.Seconds(), Unavailable: s.Unavailable,
		}
	}
	return out
}

// flowJSON is the dispatcher's flow report for its beat.
func (d *Dispatcher) flowJSON() []byte {
	b, err := json.Marshal(flowReport{SinkPaused: d.breaker.paused(), Destinations: reportOf(d.Destinations())})
	if err != nil {
		return nil
	}
	return b
}

// DestinationStatus is one destination of the table as [Admin.Status]
// sees it: its limits, what the live dispatchers reported of it with their
// last beats, added up, and its pause. A destination is listed when a
// dispatcher limits it or an operator paused it.
type DestinationStatus struct {
	Name        string  `json:"name"`
	Rate        float64 `json:"rate"`
	Burst       int     `json:"burst"`
	Concurrency int     `json:"concurrency"`
	// Dispatchers is how many live dispatchers reported it.
	Dispatchers int     `json:"dispatchers"`
	InFlight    int64   `json:"in_flight"`
	Waiting     int64   `json:"waiting"`
	HandedBack  int64   `json:"handed_back"`
	HeldSeconds float64 `json:"held_seconds"`
	// Unavailable is whether a dispatcher found its sink unavailable: its
	// messages wait for a probe there.
	Unavailable bool `json:"unavailable"`
	// Paused is its pause, null when it is not paused.
	Paused *Pause `json:"paused"`
}

// DestinationsOf adds up the live dispatchers' reports per destination and
// joins the route pauses, by name: [Status.Destinations] of what
// [Admin.LiveDispatchers] and [Admin.Pauses] read.
func DestinationsOf(live []LiveDispatcher, pauses []Pause) []DestinationStatus {
	by := map[string]*DestinationStatus{}
	get := func(name string) *DestinationStatus {
		s := by[name]
		if s == nil {
			s = &DestinationStatus{Name: name}
			by[name] = s
		}
		return s
	}
	for _, d := range live {
		for _, r := range d.Destinations {
			s := get(r.Name)
			s.Rate, s.Burst, s.Concurrency = max(s.Rate, r.Rate), max(s.Burst, r.Burst), max(s.Concurrency, r.Concurrency)
			s.Dispatchers++
			s.InFlight += int64(r.InFlight)
			s.Waiting += int64(r.Waiting)
			s.HandedBack += r.HandedBack
			s.HeldSeconds += r.HeldSeconds
			s.Unavailable = s.Unavailable || r.Unavailable
		}
	}
	for _, p := range pauses {
		if !p.Whole() {
			get(p.Route).Paused = &p
		}
	}
	out := make([]DestinationStatus, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b DestinationStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// MeanWait is the mean delay a message handed back for want of budget was
// given; 0 when none was.
func (d DestinationStatus) MeanWait() time.Duration {
	if d.HandedBack == 0 {
		return 0
	}
	return time.Duration(d.HeldSeconds / float64(d.HandedBack) * float64(time.Second))
}
