package console

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxd/outbox/internal/service"
)

// Sample is one reading of a table's gauges, taken by the console's sampler.
type Sample struct {
	At               time.Time `json:"at"`
	Pending          int64     `json:"pending"`
	Processing       int64     `json:"processing"`
	Dead             int64     `json:"dead"`
	OldestAgeSeconds float64   `json:"oldest_undelivered_age_seconds"`
	ExpiredLeases    int64     `json:"expired_leases"`
	// NewestID is the highest message id, so that the ids added between two
	// samples, less the growth of the undelivered and dead counts, are the
	// messages delivered meanwhile.
	NewestID int64 `json:"newest_id"`
	// DeliveredPerSecond is the delivery rate since the previous sample;
	// null for the first one.
	DeliveredPerSecond *float64 `json:"delivered_per_second"`
}

// sampleTimeoutMin bounds one sampling pass, however short the interval.
const sampleTimeoutMin = 5 * time.Second

// ring keeps the last samples of one table.
type ring struct {
	mu  sync.Mutex
	buf []Sample
	max int
}

func newRing(n int) *ring { return &ring{max: n} }

func (r *ring) add(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.buf); n > 0 {
		s.DeliveredPerSecond = rate(r.buf[n-1], s)
	}
	if len(r.buf) == r.max {
		copy(r.buf, r.buf[1:])
		r.buf = r.buf[:len(r.buf)-1]
	}
	r.buf = append(r.buf, s)
}

func (r *ring) all() []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Sample(nil), r.buf...)
}

// rate is messages delivered per second between two samples: new ids less
// what stayed undelivered or died. Retried dead rows and replays move rows
// between those sets without new ids, so a short burst may read low; the
// rate is floored at 0.
func rate(prev, cur Sample) *float64 {
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 || prev.NewestID == 0 && cur.NewestID == 0 {
		return nil
	}
	added := cur.NewestID - prev.NewestID
	grown := (cur.Pending + cur.Processing + cur.Dead) - (prev.Pending + prev.Processing + prev.Dead)
	v := max(float64(added-grown)/dt, 0)
	return &v
}

// runSampler samples every table at once, then every SampleInterval, until
// ctx ends.
func (s *Server) runSampler(ctx context.Context) {
	service.Every(ctx, s.cfg.SampleInterval, func() {
		for _, tb := range s.served() {
			if s.cfg.Dynamic && time.Since(time.Unix(0, tb.viewed.Load())) > viewedFor {
				continue
			}
			if err := s.sample(ctx, tb); err != nil && ctx.Err() == nil {
				s.logger.Warn("console: sampling failed", slog.String("table", tb.name), slog.Any("error", err))
			}
		}
	})
}

// sample reads one table's gauges (index-driven, cheap at any size) and
// its newest id, and refreshes its breakdowns when they are due.
func (s *Server) sample(ctx context.Context, tb *table) error {
	// A short interval must not starve a slow database of every sample.
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.SampleInterval, sampleTimeoutMin))
	defer cancel()
	g, err := tb.admin.Gauges(ctx)
	if err != nil {
		return err
	}
	newest, err := newestID(ctx, tb)
	if err != nil {
		return err
	}
	tb.samples.add(Sample{
		At: time.Now().UTC(), Pending: g.Pending, Processing: g.Processing, Dead: g.Dead,
		OldestAgeSeconds: g.OldestPendingAge.Seconds(), ExpiredLeases: g.ExpiredLeases, NewestID: newest,
	})
	return tb.breakdowns.refresh(ctx, tb, s.cfg.BreakdownInterval)
}
