package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outbox"
)

// destinations reports each limited destination of the dispatcher
// ([outbox.Dispatcher.Destinations]) at each scrape: what is in flight to
// it, what waits for its budget, and the dispatcher's share of its limits.
// Nothing until [Metrics.WatchDestinations].
type destinations struct {
	fn                                                              atomic.Pointer[func() []outbox.DestinationState]
	inFlight, waiting, handedBack, heldSeconds, rateShare, capShare *prometheus.Desc
	unavailable                                                     *prometheus.Desc
}

func newDestinations(labels prometheus.Labels) *destinations {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"destination"}, labels)
	}
	return &destinations{
		inFlight: desc("outbox_destination_in_flight", "Publishes in flight to the destination from this dispatcher."),
		waiting: desc("outbox_destination_waiting",
			"Messages of the destination this dispatcher handed back for want of budget (its rate or concurrency) that are not due yet."),
		handedBack: desc("outbox_destination_handed_back_total",
			"Messages of the destination handed back for want of budget: pending again, no attempt spent."),
		heldSeconds: desc("outbox_destination_held_seconds_total",
			"Sum of the delays the messages handed back were given: over handed_back_total, the mean wait for budget."),
		rateShare: desc("outbox_destination_rate_limit",
			"This dispatcher's share of the destination's rate, messages a second (the rate over the live dispatchers); absent without a rate."),
		capShare: desc("outbox_destination_concurrency_limit",
			"This dispatcher's share of the destination's publishes in flight; absent without a concurrency."),
		unavailable: desc("outbox_destination_unavailable",
			"1 while the destination's sink said it is unavailable and its messages wait for a probe (a breaker per destination, with routes)."),
	}
}

func (d *destinations) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.inFlight, d.waiting, d.handedBack, d.heldSeconds, d.rateShare, d.capShare, d.unavailable} {
		ch <- x
	}
}

func (d *destinations) Collect(ch chan<- prometheus.Metric) {
	fn := d.fn.Load()
	if fn == nil {
		return
	}
	for _, s := range (*fn)() {
		ch <- prometheus.MustNewConstMetric(d.inFlight, prometheus.GaugeValue, float64(s.InFlight), s.Name)
		ch <- prometheus.MustNewConstMetric(d.waiting, prometheus.GaugeValue, float64(s.Waiting), s.Name)
		ch <- prometheus.MustNewConstMetric(d.handedBack, prometheus.CounterValue, float64(s.HandedBack), s.Name)
		ch <- prometheus.MustNewConstMetric(d.heldSeconds, prometheus.CounterValue, s.HeldFor.Seconds(), s.Name)
		unavailable := 0.0
		if s.Unavailable {
			unavailable = 1
		}
		ch <- prometheus.MustNewConstMetric(d.unavailable, prometheus.GaugeValue, unavailable, s.Name)
		if s.Rate > 0 {
			ch <- prometheus.MustNewConstMetric(d.rateShare, prometheus.GaugeValue, s.RateShare, s.Name)
		}
		if s.Concurrency > 0 {
			ch <- prometheus.MustNewConstMetric(d.capShare, prometheus.GaugeValue, float64(s.ConcurrencyShare), s.Name)
		}
	}
}

// WatchDestinations reports what fn (a dispatcher's Destinations) returns
// at each scrape, per destination: outbox_destination_in_flight,
// _waiting, _handed_back_total, _held_seconds_total, _rate_limit and
// _concurrency_limit and _unavailable.
func (m *Metrics) WatchDestinations(fn func() []outbox.DestinationState) {
	m.destinations.fn.Store(&fn)
}
