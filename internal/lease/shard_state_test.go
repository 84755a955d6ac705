package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

func ptr[T any](v T) *T { return &v }

// heldOf is a membership holding shards, each under token 10+shard.
func heldOf(shards ...int) membership {
	m := newMembership()
	for _, s := range shards {
		m.held[s] = int64(10 + s)
	}
	return m
}

func TestUnitReadPlan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		held          []int
		isolated      map[int]int64
		inFlight      map[int64]int // id → shard
		abandoned     []int
		plain, isoOut []int
	}{
		{name: "nothing held"},
		{name: "all plain, in order", held: []int{3, 1, 2}, plain: []int{1, 2, 3}},
		{name: "plain shards are read with messages in flight", held: []int{1, 2}, inFlight: map[int64]int{7: 1}, plain: []int{1, 2}},
		{name: "an isolated shard is read when nothing of it is in flight", held: []int{1, 2}, isolated: map[int]int64{2: 50}, plain: []int{1}, isoOut: []int{2}},
		{name: "an isolated shard waits for its message in flight", held: []int{1, 2}, isolated: map[int]int64{2: 50}, inFlight: map[int64]int{40: 2}, plain: []int{1}},
		{name: "an abandoned shard is not read", held: []int{1, 2, 3}, isolated: map[int]int64{3: 9}, abandoned: []int{2, 3}, plain: []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, f := heldOf(tt.held...), newFlight(true)
			for s, id := range tt.isolated {
				m.isolated[s] = id
			}
			for id, s := range tt.inFlight {
				f.ids[id] = store.ShardLease{Shard: s, Token: m.held[s]}
			}
			for _, s := range tt.abandoned {
				f.abandoned[s] = true
			}
			plain, isolated, tokens := readPlan(&m, &f)
			require.Equal(t, tt.plain, plain)
			require.Equal(t, tt.isoOut, isolated)
			require.Equal(t, m.held, tokens, "every held shard's token, abandoned ones too")
		})
	}
}

func TestUnitIsolation(t *testing.T) {
	t.Parallel()
	row := func(id int64, shard int) store.Row { return store.Row{ID: id, Shard: shard} }
	m := heldOf(1, 2, 3, 4)
	m.isolated = map[int]int64{1: 100, 2: 100, 3: 100, 4: 100}
	tokens := map[int]int64{1: 11, 2: 12, 3: 13, 4: 14}
	read := []store.Row{row(50, 1), row(150, 2), row(60, 4)} // shard 3 has nothing due

	writes, rows, ended := m.isolation([]int{1, 2, 3, 4}, tokens, read, 2)
	require.Equal(t, []store.Isolation{
		{ShardLease: store.ShardLease{Shard: 1, Token: 11}, ID: ptr(int64(50))},
		{ShardLease: store.ShardLease{Shard: 2, Token: 12}},
		{ShardLease: store.ShardLease{Shard: 3, Token: 13}},
	}, writes, "a message up to isolate_through is declared; past it, or with none due, the isolation ends; shard 4 waits for room")
	require.Equal(t, []store.Row{row(50, 1), row(150, 2)}, rows, "at most batch rows")
	require.Equal(t, map[int]bool{2: true, 3: true}, ended)

	m.isolatedWritten([]int{1, 2}, ended) // shard 3's write did not hold
	require.Equal(t, map[int]int64{1: 100, 3: 100, 4: 100}, m.isolated)
}

func TestUnitFairShareAndExtras(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ count, alive, share int }{
		{16, 1, 16}, {16, 3, 6}, {16, 4, 4}, {16, 17, 1}, {1, 2, 1}, {16, 0, 16},
	} {
		require.Equal(t, tt.share, fairShare(tt.count, tt.alive), "%d shards, %d alive", tt.count, tt.alive)
	}
	m := heldOf(0, 1, 2, 3, 4, 5)
	require.Empty(t, m.extras(6, nil))
	require.Equal(t, []store.ShardLease{{Shard: 5, Token: 15}, {Shard: 3, Token: 13}},
		m.extras(4, map[int]bool{4: true}), "highest first, skipping busy shards")
	require.Equal(t, []store.ShardLease{{Shard: 5, Token: 15}, {Shard: 4, Token: 14}, {Shard: 3, Token: 13}, {Shard: 2, Token: 12}, {Shard: 1, Token: 11}, {Shard: 0, Token: 10}},
		m.extras(0, nil))
}

func TestUnitMembershipRenewAndTake(t *testing.T) {
	t.Parallel()
	m := heldOf(1, 2)
	m.isolated[2] = 9
	m.take(store.AcquiredShard{ShardLease: store.ShardLease{Shard: 3, Token: 30}, IsolateThrough: ptr(int64(77))})
	require.True(t, m.holds(3, 30))
	require.False(t, m.holds(3, 29), "another token is not held")
	require.Equal(t, map[int]int64{2: 9, 3: 77}, m.isolated)

	m.renewed([]store.ShardLease{{Shard: 1, Token: 11}, {Shard: 3, Token: 30}})
	require.Equal(t, []int{1, 3}, m.sorted())
	require.Equal(t, map[int]int64{3: 77}, m.isolated, "a lost shard is no longer isolated")

	m.drop([]store.ShardLease{{Shard: 3, Token: 30}})
	require.Equal(t, []store.ShardLease{{Shard: 1, Token: 11}}, m.leases())
	require.Empty(t, m.isolated)
}

// A hung publish abandons its shard; the shard is given up once nothing
// but hung publishes of it are in flight, and a late verdict of the hung
// publish does not forget the same id read again under a new token.
func TestUnitFlightHungAndSettle(t *testing.T) {
	t.Parallel()
	f := newFlight(true)
	f.ids[1] = store.ShardLease{Shard: 4, Token: 7}
	f.ids[2] = store.ShardLease{Shard: 4, Token: 7}
	f.ids[3] = store.ShardLease{Shard: 5, Token: 8}

	f.markHung([]store.Lease{{ID: 1, Version: 7}, {ID: 3, Version: 99}})
	require.Equal(t, map[int]bool{4: true}, f.abandoned, "a hung lease of another token abandons nothing")
	require.Empty(t, f.giveUp(), "message 2 of shard 4 is still being delivered")
	require.Equal(t, map[int]bool{4: true, 5: true}, f.busy())

	f.settle([]store.RowWrite{{ID: 2, LeaseVersion: 7}})
	require.Equal(t, []int{4}, f.giveUp())
	require.Empty(t, f.abandoned)
	_, ok := f.of(1)
	require.False(t, ok, "a given-up shard's ids are forgotten: its next owner reads them")
	require.Empty(t, f.hung, "nor their hung publishes: a read again is not hung")

	// Read again after a retake, while the hung publish still runs; then
	// another message of the shard hangs: the shard is not given up while
	// message 1 goes out under the new token.
	f.ids[1] = store.ShardLease{Shard: 4, Token: 9}
	f.ids[6] = store.ShardLease{Shard: 4, Token: 9}
	f.markHung([]store.Lease{{ID: 6, Version: 9}})
	require.Empty(t, f.giveUp(), "message 1 is being delivered again under token 9")

	f.settle([]store.RowWrite{{ID: 1, LeaseVersion: 7}})
	l, ok := f.of(1)
	require.True(t, ok, "the hung publish's verdict leaves the new read alone")
	require.Equal(t, int64(9), l.Token)
	require.ElementsMatch(t, []int64{1, 3, 6}, f.exclude())

	// A hung verdict of another token does not clear a hang of this one.
	f.markHung([]store.Lease{{ID: 1, Version: 9}})
	f.settle([]store.RowWrite{{ID: 1, LeaseVersion: 7}})
	require.Equal(t, []int{4}, f.giveUp(), "both publishes of shard 4 in flight are hung")
}

// due renews a renewal interval after the last renewal, and a dispatcher
// holding nothing every poll interval; between renewals it looks (a read)
// at most once a poll interval.
func TestUnitShardRenewalDue(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	s := newShardLeases(nil, nil, Config{
		Kind: Shards, Owner: "a", Lease: 30 * time.Second, MaxAttempts: 3, PollInterval: time.Second, Window: 10, Clock: clk.now,
	}, Callbacks{}, nil, 4, nil)
	ctx := context.Background()
	due, _, err := s.due(ctx)
	require.NoError(t, err)
	require.True(t, due, "never renewed")

	s.renewedAt = clk.now()
	due, _, _ = s.due(ctx)
	require.False(t, due, "just renewed")
	clk.advance(time.Second)
	due, _, _ = s.due(ctx)
	require.True(t, due, "holding nothing: look every poll interval")

	s.members = heldOf(0, 1, 2, 3)
	s.renewedAt = clk.now()
	clk.advance(9 * time.Second)
	s.lookedAt = clk.now().Add(-time.Second / 2)
	due, _, _ = s.due(ctx)
	require.False(t, due, "looked within the poll interval: nothing to do before the renewal")
	clk.advance(time.Second)
	due, _, _ = s.due(ctx)
	require.True(t, due, "a third of the lease since the last renewal")
	require.Equal(t, 10*time.Second, s.RenewEvery())
	require.Equal(t, time.Second, s.tick(), "the poll interval, shorter than a quarter of the renewal")
}

// A look renews (and so acquires) when short of the share with shards
// free, and gives back the shards beyond the share that nothing is in
// flight on when beyond it.
func TestUnitLook(t *testing.T) {
	t.Parallel()
	busyOn := func(shards ...int) flight {
		f := newFlight(true)
		for i, s := range shards {
			f.ids[int64(i+1)] = store.ShardLease{Shard: s}
		}
		return f
	}
	tests := []struct {
		name               string
		held               []int
		busy               []int
		count, free, alive int
		off                bool
	}{
		{"alone with every shard", []int{0, 1, 2, 3}, nil, 4, 0, 1, false},
		{"at its share", []int{0, 1}, nil, 4, 0, 2, false},
		{"short, nothing free", []int{0}, nil, 4, 0, 2, false},
		{"short, shards free", []int{0}, nil, 4, 1, 2, true},
		{"beyond its share after the others came back", []int{0, 1, 2, 3}, nil, 4, 0, 2, true},
		{"beyond, but every extra busy", []int{0, 1, 2, 3}, []int{0, 1, 2, 3}, 4, 0, 2, false},
		{"beyond, one extra free to give", []int{0, 1, 2, 3}, []int{1, 2, 3}, 4, 0, 2, true},
	}
	for _, tt := range tests {
		m, f := heldOf(tt.held...), busyOn(tt.busy...)
		renew, extra := look(&m, &f, tt.count, tt.free, tt.alive)
		require.Equal(t, tt.off, renew || len(extra) > 0, tt.name)
		require.False(t, renew && len(extra) > 0, tt.name)
	}
	m := heldOf(0, 1, 2, 3)
	f := busyOn(3)
	renew, extra := look(&m, &f, 4, 0, 2)
	require.False(t, renew, "beyond its share: no renewal, which would take shards too")
	require.Equal(t, []store.ShardLease{{Shard: 2, Token: 12}, {Shard: 1, Token: 11}}, extra, "the highest shards with nothing in flight")
}

// A shard given up for a hung publish leaves membership in the same step
// as its ids leave the flight: between the two, a read would deliver the
// hung message again under the token its hung publish holds.
func TestUnitGiveUpHung(t *testing.T) {
	t.Parallel()
	m, f := heldOf(1, 2), newFlight(true)
	f.ids[10] = store.ShardLease{Shard: 1, Token: 11}
	f.ids[20] = store.ShardLease{Shard: 2, Token: 12}
	f.markHung([]store.Lease{{ID: 10, Version: 11}})
	plain, _, _ := readPlan(&m, &f)
	require.Equal(t, []int{2}, plain, "an abandoned shard is not read")

	require.Equal(t, []store.ShardLease{{Shard: 1, Token: 11}}, giveUpHung(&m, &f))
	plain, _, tokens := readPlan(&m, &f)
	require.Equal(t, []int{2}, plain, "the given-up shard is not read again before its release")
	require.False(t, m.holds(1, tokens[1]), "rows read from it are not handed over")
	require.ElementsMatch(t, []int64{20}, f.exclude())
}
