package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// The lease registry on a controlled clock: deadlines, publishes found
// hung once, renewals of the leases kept and the list of those lost,
// publishes past their deadline.
func TestUnitRegistry(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	r := NewRegistry(clk.now)
	a, b, c := store.Lease{ID: 1, Version: 1}, store.Lease{ID: 2, Version: 1}, store.Lease{ID: 3, Version: 1}
	entries := r.Add([]store.Lease{a, b, c}, clk.now().Add(10*time.Second))
	ea, eb := &entries[0], &entries[1]
	require.ElementsMatch(t, []int64{1, 2, 3}, r.IDs())
	require.Equal(t, 10*time.Second, r.UntilDeadline(a))
	require.Zero(t, r.UntilDeadline(store.Lease{ID: 9}), "an unknown lease is not trusted")

	var cancelled error
	require.Equal(t, 10*time.Second, r.Remaining(ea), "an entry reads its own lease")
	r.Begin(ea, func(err error) { cancelled = err })
	r.Begin(eb, func(error) {})
	clk.advance(2 * time.Second)
	require.Equal(t, 2*time.Second, r.End(eb), "a publish's duration")
	require.True(t, r.Publishing(a))
	require.False(t, r.Publishing(b))

	require.Equal(t, []store.Lease{a}, r.MarkHung(clk.now().Add(-time.Second)), "a publish begun before the cutoff is hung")
	require.Empty(t, r.MarkHung(clk.now().Add(-time.Second)), "found hung once")
	require.Equal(t, []store.Lease{b}, r.Beatable(), "a queued row is not extended, nor a hung publish")

	kept, lost := r.Renew(clk.now().Add(20*time.Second), func(l store.Lease) bool { return l != c })
	require.Equal(t, 2, kept)
	require.Equal(t, []store.Lease{c}, lost)
	require.Equal(t, 20*time.Second, r.UntilDeadline(a))
	require.Equal(t, 8*time.Second, r.UntilDeadline(c), "a lost lease keeps its old deadline")
	require.Equal(t, clk.now().Add(20*time.Second), r.LastDeadline([]store.Lease{a, c}))

	require.Empty(t, r.Overdue())
	clk.advance(21 * time.Second)
	require.Equal(t, []store.Lease{a}, r.Overdue(), "only publishes run past their deadline")
	require.True(t, r.Cancel(a, ErrLost))
	require.True(t, errors.Is(cancelled, ErrLost))
	require.False(t, r.Cancel(a, ErrLost), "a publish is cancelled once: a hung one is not reported at every renewal")
	require.False(t, r.Cancel(b, ErrLost), "a publish that ended is not cancelled")

	r.Forget([]store.Lease{a, b, c})
	require.Empty(t, r.IDs())
	require.Zero(t, r.UntilDeadline(a))
	// An entry forgotten reads as a lease not registered: no time left,
	// and a publish begun through it is not recorded.
	require.Zero(t, r.Remaining(eb))
	r.Begin(eb, func(error) {})
	require.False(t, r.Publishing(b))
	require.Zero(t, r.End(eb))
	require.True(t, r.LastDeadline([]store.Lease{a, b, c}).IsZero())
}
