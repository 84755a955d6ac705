// Package sinktest is the conformance suite every outboxd sink passes
// against its real broker: delivery with the id, metadata and payload
// intact, classification of failures, behaviour while the broker is down and
// after it comes back (with no restart of the sink), concurrency and context
// cancellation.
//
// A sink package's test calls [Run] with a [Harness] that builds the sink
// against an address (the suite's [Proxy] in front of the broker) and a
// [Receiver] that reads what reached the destination.
package sinktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// Received is one message as it arrived at the destination, normalised by
// the harness.
type Received struct {
	// ID is the message's identity as the destination carries it (the
	// dedupe key).
	ID string
	// Payload is the body exactly as received.
	Payload []byte
	// Meta holds the metadata the sink passed on, under these keys:
	// event_type, aggregate_type, aggregate_id, fencing_token, attempt.
	Meta map[string]string
}

// Receiver reads what a sink delivered to its destination.
type Receiver interface {
	// Receive waits up to timeout for n messages that arrived since the
	// previous call (or since the destination was created, on the first) and
	// returns them in arrival order. It returns fewer only when the timeout
	// passes.
	Receive(t *testing.T, n int, timeout time.Duration) []Received
}

// Harness describes one sink implementation to the suite.
type Harness struct {
	// Upstream is the real broker's host:port; the suite puts a Proxy in
	// front of it for every subtest.
	Upstream string

	// New returns a sink that publishes through addr (host:port of the
	// proxy) to a destination of its own (a fresh subject, queue, stream or
	// topic), and a Receiver for that destination that talks to the broker
	// directly. The suite closes the sink.
	New func(t *testing.T, addr string) (outbox.Sink, Receiver)

	// Permanent, if set, returns a sink (through addr) and a message whose
	// publish the broker rejects for good (no such stream, an unroutable
	// message...): the suite checks it is classified Permanent.
	Permanent func(t *testing.T, addr string) (outbox.Sink, *outbox.Message)

	// DownTimeout bounds one publish while the broker is down. Defaults to 3s.
	DownTimeout time.Duration
}

var nextID atomic.Int64

func init() { nextID.Store(time.Now().UnixNano() % 1e9 * 1000) }

// NewMessage returns a message with a fresh id and a payload that exercises
// encodings (unicode, nesting, numbers that JSON re-encoding would change).
func NewMessage(aggregateID string) *outbox.Message {
	id := nextID.Add(1)
	return &outbox.Message{
		ID:            id,
		UID:           newUID(),
		AggregateType: "order",
		AggregateID:   aggregateID,
		EventType:     "OrderCreated",
		Payload:       json.RawMessage(fmt.Sprintf(`{"id": %d, "amount": 1.50, "name": "Zoë 😀", "tags": ["a", "b"], "nested": {"x": null}}`, id)),
		CreatedAt:     time.Now().UTC().Truncate(time.Microsecond),
		Attempt:       2,
		FencingToken:  7,
	}
}

// newUID is a random (version 4) UUID in canonical form, as the uid
// column's gen_random_uuid() gives.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.DownTimeout == 0 {
		h.DownTimeout = 3 * time.Second
	}
	su := suite{h: h}
	t.Run("DeliversIDMetadataAndPayload", su.deliversIDMetadataAndPayload)
	t.Run("NamespacedID", su.namespacedID)
	t.Run("RowWithoutUIDSendsItsID", su.rowWithoutUID)
	t.Run("ConcurrentPublishes", su.concurrentPublishes)
	t.Run("CancelledContextIsRetryable", su.cancelledContextIsRetryable)
	t.Run("BrokerDownIsRetryableThenRecovers", su.brokerDownIsRetryableThenRecovers)
	if h.Permanent != nil {
		t.Run("PermanentFailure", su.permanentFailure)
	}
}

// suite is one run of the conformance suite; each case is a method.
type suite struct{ h Harness }

// setup starts a sink behind a fresh proxy to the broker.
func (su suite) setup(t *testing.T) (outbox.Sink, Receiver, *Proxy) {
	t.Helper()
	p := NewProxy(t, su.h.Upstream)
	s, r := su.h.New(t, p.Addr())
	t.Cleanup(func() { _ = s.Close() })
	return s, r, p
}

func (su suite) deliversIDMetadataAndPayload(t *testing.T) {
	t.Parallel()
	s, r, _ := su.setup(t)
	m := NewMessage("Agg 42/ü")
	require.NoError(t, s.Publish(t.Context(), m))
	got := r.Receive(t, 1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, m.UID, got[0].ID, "the identity, not the row id")
	require.Equal(t, string(m.Payload), string(got[0].Payload), "payload must pass byte for byte")
	require.Equal(t, map[string]string{
		"event_type":     m.EventType,
		"aggregate_type": m.AggregateType,
		"aggregate_id":   m.AggregateID,
		"fencing_token":  strconv.FormatInt(m.FencingToken, 10),
		"attempt":        strconv.Itoa(m.Attempt),
	}, pick(got[0].Meta, "event_type", "aggregate_type", "aggregate_id", "fencing_token", "attempt"))
}

func (su suite) namespacedID(t *testing.T) {
	// With Config.IDNamespace the id the destination carries (the
	// dedupe key) is "NAMESPACE:UID", not the bare identity.
	t.Parallel()
	s, r, _ := su.setup(t)
	m := NewMessage("agg-ns")
	m.IDNamespace = "orders"
	require.NoError(t, s.Publish(t.Context(), m))
	got := r.Receive(t, 1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, "orders:"+m.UID, got[0].ID)
}

func (su suite) rowWithoutUID(t *testing.T) {
	// A row inserted before the uid column has none: it goes out under
	// its decimal id, the identity it was first delivered under.
	t.Parallel()
	s, r, _ := su.setup(t)
	m := NewMessage("agg-old")
	m.UID = ""
	require.NoError(t, s.Publish(t.Context(), m))
	got := r.Receive(t, 1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, strconv.FormatInt(m.ID, 10), got[0].ID)
}

func (su suite) concurrentPublishes(t *testing.T) {
	t.Parallel()
	s, r, _ := su.setup(t)
	const n = 100
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = NewMessage(fmt.Sprintf("agg-%d", i%7))
	}
	PublishConcurrently(t, s, 10, n/10, func(w, i int) *outbox.Message { return msgs[w+i*10] })
	got := r.Receive(t, n, 20*time.Second)
	want := make([]string, n)
	for i, m := range msgs {
		want[i] = m.IDString()
	}
	ids := make([]string, len(got))
	for i, g := range got {
		ids[i] = g.ID
	}
	slices.Sort(want)
	slices.Sort(ids)
	require.Equal(t, want, ids, "every message delivered once")
}

// PublishConcurrently publishes workers × per messages, per from each of
// workers goroutines, message i of worker w being next(w, i), and fails t
// on any publish error. It returns how long the publishes took.
func PublishConcurrently(t *testing.T, s outbox.Sink, workers, per int, next func(w, i int) *outbox.Message) time.Duration {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers*per)
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				if err := s.Publish(t.Context(), next(w, i)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return time.Since(start)
}

// URLCase is a URL a sink's CheckURL refuses, and a part of the error it
// must give.
type URLCase = struct{ Name, URL, Want string }

// CheckURLs checks a sink's CheckURL: valid passes, and each case fails
// with an error holding its Want and never the password "s3cr3t" its URL
// may carry. With newSink set (the sink's New, for a sink whose New does
// not connect), New must fail with the same error.
func CheckURLs(t *testing.T, check func(rawURL string) error, newSink func(rawURL string) error, valid string, cases []URLCase) {
	t.Helper()
	require.NoError(t, check(valid))
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			err := check(tc.URL)
			require.ErrorContains(t, err, tc.Want)
			require.NotContains(t, err.Error(), "s3cr3t")
			if newSink != nil {
				require.EqualError(t, newSink(tc.URL), err.Error(), "CheckURL reports what New does")
			}
		})
	}
}

func (su suite) cancelledContextIsRetryable(t *testing.T) {
	t.Parallel()
	s, _, _ := su.setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	err := s.Publish(ctx, NewMessage("a"))
	require.Error(t, err, "a publish with a cancelled context cannot have been acknowledged")
	require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	require.Less(t, time.Since(start), 2*time.Second)
}

func (su suite) brokerDownIsRetryableThenRecovers(t *testing.T) {
	t.Parallel()
	s, r, p := su.setup(t)
	first := NewMessage("a")
	require.NoError(t, s.Publish(t.Context(), first))
	require.Len(t, r.Receive(t, 1, 10*time.Second), 1)

	p.Cut()
	m := NewMessage("a")
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), su.h.DownTimeout)
		start := time.Now()
		err := s.Publish(ctx, m)
		cancel()
		require.Error(t, err, "publish succeeded while the broker was unreachable")
		require.True(t, outbox.IsRetryable(err), "want retryable while down, got %v", err)
		require.Less(t, time.Since(start), su.h.DownTimeout+2*time.Second, "publish overran its context")
	}

	p.Restore()
	// As the dispatcher would: retry the same message until it goes through.
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), su.h.DownTimeout)
		err = s.Publish(ctx, m)
		cancel()
		if err == nil {
			break
		}
		require.True(t, outbox.IsRetryable(err), "want retryable while recovering, got %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err, "sink did not recover after the broker came back")
	// At least once: a protocol that resends unacknowledged packets on
	// reconnect may deliver the first message again before m.
	var ids []string
	for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait) && !slices.Contains(ids, m.IDString()); {
		for _, g := range r.Receive(t, 1, time.Until(wait)) {
			ids = append(ids, g.ID)
		}
	}
	require.Contains(t, ids, m.IDString(), "the retried message arrived after recovery")
	for _, id := range ids {
		require.Contains(t, []string{first.IDString(), m.IDString()}, id, "only the two published messages arrive")
	}
}

func (su suite) permanentFailure(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, su.h.Upstream)
	s, m := su.h.Permanent(t, p.Addr())
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := s.Publish(ctx, m)
	require.Error(t, err)
	require.True(t, outbox.IsPermanent(err), "want permanent, got %v", err)
}

func pick(m map[string]string, keys ...string) map[string]string {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}
