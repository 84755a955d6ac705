package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

func TestExpiryWatch(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	db := time.Unix(5000, 0)
	poll, lease := time.Second, time.Minute
	all, skip := store.ExpiredLeases{}, store.ExpiredLeases{Skip: true}
	var e expiryWatch

	require.Equal(t, all, e.next(t0), "the first look is from the front")
	e.looked(all, t0, db, poll, lease, 0, 100)
	require.Equal(t, skip, e.next(t0.Add(poll/2)), "not again within a poll interval")
	t1 := t0.Add(poll)
	since := store.ExpiredLeases{Since: db}
	require.Equal(t, since, e.next(t1), "then from where the last look began")
	e.looked(since, t1, db.Add(poll), poll, lease, 100, 100)
	require.Equal(t, since, e.next(t1), "a look that took a whole batch looks again at once, from where it was")
	e.looked(since, t1, db.Add(poll), poll, lease, 3, 100)
	require.Equal(t, skip, e.next(t1))
	require.Equal(t, store.ExpiredLeases{Since: db.Add(poll)}, e.next(t1.Add(poll)))

	// A claim that returned no row tells no time: the look stays where it was.
	e.looked(store.ExpiredLeases{Since: db.Add(poll)}, t1.Add(poll), time.Time{}, poll, lease, 0, 100)
	require.Equal(t, store.ExpiredLeases{Since: db.Add(poll)}, e.next(t1.Add(2*poll)))
	require.Equal(t, all, e.next(t0.Add(lease)), "from the front once per lease")
}
