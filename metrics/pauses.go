package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outbox"
)

// WholeTable is the destination label of the whole table's pause.
const WholeTable = "*"

// pauses reports the pauses in force as the dispatcher last read them
// ([outbox.Dispatcher.Paused]): one series per paused destination, gone
// once it is resumed. Nothing until [Metrics.WatchPauses].
type pauses struct {
	fn            atomic.Pointer[func() []outbox.Pause]
	paused, since *prometheus.Desc
}

func newPauses(labels prometheus.Labels) *pauses {
	return &pauses{
		paused: prometheus.NewDesc("outbox_destination_paused",
			`1 while an operator has the destination paused (outboxd pause): its messages wait, pending; destination="*" is the whole table.`,
			[]string{"destination"}, labels),
		since: prometheus.NewDesc("outbox_destination_paused_since_seconds",
			"When the destination was paused, Unix seconds on the database's clock.",
			[]string{"destination"}, labels),
	}
}

func (p *pauses) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.paused
	ch <- p.since
}

func (p *pauses) Collect(ch chan<- prometheus.Metric) {
	fn := p.fn.Load()
	if fn == nil {
		return
	}
	for _, x := range (*fn)() {
		name := x.Route
		if x.Whole() {
			name = WholeTable
		}
		ch <- prometheus.MustNewConstMetric(p.paused, prometheus.GaugeValue, 1, name)
		ch <- prometheus.MustNewConstMetric(p.since, prometheus.GaugeValue, float64(x.At.UnixMilli())/1e3, name)
	}
}

// WatchPauses reports what fn (a dispatcher's Paused) returns at each
// scrape: outbox_destination_paused and
// outbox_destination_paused_since_seconds per paused destination.
func (m *Metrics) WatchPauses(fn func() []outbox.Pause) {
	m.pauses.fn.Store(&fn)
}
