package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// TestErrorTextWithAnyBytesSpoilsNoBatch: a sink whose error quotes raw
// bytes (a NUL from a response body, invalid UTF-8 from a broker reply, a
// panic value) gets its message dead with a readable reason, and the healthy
// messages of the same batch end done after one publish each. Before, the
// batched finalize was refused on every try, its healthy deliveries were
// published again on every lease and finally reaped dead.
func TestErrorTextWithAnyBytesSpoilsNoBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 20, "agg")
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		switch m.ID {
		case ids[3]:
			return outbox.Permanent(fmt.Errorf("422 body: %s", "{\"x\":\"\x00\"}"))
		case ids[11]:
			panic("reply \xff\xfe")
		}
		return nil
	})
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{
		BatchSize: 20, Workers: 4, Lease: 4 * time.Second, PublishTimeout: time.Second,
	})

	drain(t, d)

	require.Equal(t, each(ids, 1), publishCounts(rec), "every message published once")
	for i, id := range ids {
		r := b.row(t, id)
		switch i {
		case 3, 11:
			require.Equal(t, "dead", r.Status)
			require.True(t, utf8.ValidString(r.lastError()))
			require.NotContains(t, r.lastError(), "\x00")
		default:
			require.Equal(t, "done", r.Status, "message %d", i)
		}
	}
	require.True(t, strings.Contains(b.row(t, ids[3]).lastError(), `422 body: {"x":""}`), b.row(t, ids[3]).lastError())
}
