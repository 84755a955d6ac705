package outbox_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// With Config.IDNamespace every message reaches the sink qualified, so the
// id sinks send is "orders:ID"; without it, the bare id.
func TestIDNamespaceQualifiesTheSentID(t *testing.T) {
	t.Parallel()

	for _, ns := range []string{"orders", ""} {
		t.Run("namespace="+ns, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := b.enqueueN(t, 3, "agg")
			rec := newRecorder(func(context.Context, *outbox.Message) error { return nil })
			drain(t, b.dispatcher(t, rec.Sink(), &outbox.Config{IDNamespace: ns}))

			got := map[int64]string{}
			for _, m := range rec.Messages() {
				got[m.ID] = m.IDString()
				require.Equal(t, m.IDString(), m.DedupeKey())
			}
			want := map[int64]string{}
			for _, id := range ids {
				want[id] = strconv.FormatInt(id, 10)
				if ns != "" {
					want[id] = ns + ":" + want[id]
				}
			}
			require.Equal(t, want, got)
		})
	}
}
