package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

type timingHook struct {
	outbox.BaseHook
	mu                 sync.Mutex
	claims, finals     []time.Duration
	claimRows, finRows int
}

func (h *timingHook) OnClaim(e outbox.ClaimEvent) {
	h.mu.Lock()
	h.claims = append(h.claims, e.Duration)
	h.claimRows += e.Rows
	h.mu.Unlock()
}
func (h *timingHook) OnFinalize(e outbox.FinalizeEvent) {
	h.mu.Lock()
	h.finals = append(h.finals, e.Duration)
	h.finRows += e.Rows
	h.mu.Unlock()
}

func sum(d []time.Duration) time.Duration {
	var s time.Duration
	for _, x := range d {
		s += x
	}
	return s
}

func TestTimingProbe(t *testing.T) {
	for _, shards := range []bool{false, true} {
		bundle := setup(t)
		mode := outbox.LeaseRows
		if shards {
			require.NoError(t, bundle.admin.EnableShards(context.Background(), 16))
			mode = outbox.LeaseShards
		}
		_, err := bundle.pool.Exec(context.Background(), `INSERT INTO `+bundle.quoted+` (aggregate_type, aggregate_id, event_type, payload)
				SELECT 'order', (g % 1000)::text, 'OrderCreated', '{"n":1}' FROM generate_series(1, 100000) AS g`)
		require.NoError(t, err)
		_, err = bundle.pool.Exec(context.Background(), "VACUUM ANALYZE "+bundle.quoted)
		require.NoError(t, err)
		h := &timingHook{}
		sink := outbox.SinkFunc(func(context.Context, *outbox.Message) error { return nil })
		d, err := outbox.NewDispatcher(bundle.pool, sink, &outbox.Config{Table: bundle.table, Logger: quietLogger(), PollInterval: 10 * time.Millisecond, LeaseMode: mode, Hook: h})
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, d.Drain(context.Background()))
		el := time.Since(start)
		t.Logf("shards=%v %.0f msg/s; claims %d avg %s rows %.1f total %s; finalizes %d avg %s rows %.1f total %s", shards, 100000/el.Seconds(),
			len(h.claims), sum(h.claims)/time.Duration(len(h.claims)), float64(h.claimRows)/float64(len(h.claims)), sum(h.claims),
			len(h.finals), sum(h.finals)/time.Duration(len(h.finals)), float64(h.finRows)/float64(len(h.finals)), sum(h.finals))
	}
}
