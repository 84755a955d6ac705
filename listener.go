package outbox

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/store"
)

// Listener is one LISTEN connection shared by the dispatchers of one
// database. A dispatcher given a Listener ([Config.Listener]) hears its
// table's notifications through it instead of holding a connection of its
// own: a thousand tables relayed from one database cost one listening
// connection, not a thousand.
//
// The connection is opened with the first dispatcher that runs with the
// Listener and closed when the last one stops; it LISTENs on the channel
// of every table with a dispatcher running, and reconnects with backoff
// when it fails (the dispatchers poll meanwhile, and look everywhere again
// once it is back). A Listener is safe for concurrent use; its pool must
// be the database the dispatchers relay.
type Listener struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	poll time.Duration

	// life orders the connection's starts and stops: one runs at a time.
	life sync.Mutex
	mu   sync.Mutex
	// subs are the dispatchers listening, by channel.
	subs map[string]map[*listenSub]struct{}
	// changed wakes the connection's wait when subs changed.
	changed chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
	// probed is set once a probe notification was sent: a pooler that
	// swallows notifications is reported once per Listener.
	probed bool
}

// listenSub is one dispatcher's interest in its table's channel; heard is
// set while the connection LISTENs on it.
type listenSub struct {
	d       *Dispatcher
	channel string
	heard   bool
}

// NewListener returns a Listener on pool's database; logger may be nil
// (slog.Default).
func NewListener(pool *pgxpool.Pool, logger *slog.Logger) *Listener {
	if logger == nil {
		logger = slog.Default()
	}
	return newListener(pool, logger.With(slog.String("component", "listener")), 0)
}

// newListener is a Listener logging to log; poll, when set, is the poll
// interval its dispatchers fall back to, said with the pooler warning.
func newListener(pool *pgxpool.Pool, log *slog.Logger, poll time.Duration) *Listener {
	return &Listener{pool: pool, log: log, poll: poll, subs: map[string]map[*listenSub]struct{}{}, changed: make(chan struct{}, 1)}
}

// subscribe makes d hear channel's notifications; the function returned
// ends that, and stops the connection once no dispatcher is left.
func (l *Listener) subscribe(d *Dispatcher, channel string) func() {
	s := &listenSub{d: d, channel: channel}
	l.life.Lock()
	defer l.life.Unlock()
	l.mu.Lock()
	if l.subs[channel] == nil {
		l.subs[channel] = map[*listenSub]struct{}{}
	}
	l.subs[channel][s] = struct{}{}
	if l.done == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l.stop, l.done = cancel, make(chan struct{})
		go l.run(ctx, l.done)
	}
	l.mu.Unlock()
	l.poke()
	return func() { l.unsubscribe(s) }
}

func (l *Listener) unsubscribe(s *listenSub) {
	l.life.Lock()
	defer l.life.Unlock()
	l.mu.Lock()
	delete(l.subs[s.channel], s)
	if len(l.subs[s.channel]) == 0 {
		delete(l.subs, s.channel)
	}
	s.d.listening.Store(false)
	stop, done := l.stop, l.done
	last := len(l.subs) == 0
	if last {
		l.stop, l.done = nil, nil
	}
	l.mu.Unlock()
	if last && stop != nil {
		stop()
		<-done
		return
	}
	l.poke()
}

func (l *Listener) poke() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// run keeps the connection until ctx ends, reconnecting with backoff.
func (l *Listener) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.runOnce(ctx, func() { backoff = 100 * time.Millisecond })
		l.down()
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("listener failed; its dispatchers poll until it reconnects",
			slog.Any("error", err), slog.Duration("retry_in", backoff))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// down marks every dispatcher not heard: they poll.
func (l *Listener) down() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, subs := range l.subs {
		for s := range subs {
			s.heard = false
			s.d.listening.Store(false)
		}
	}
}

func (l *Listener) runOnce(ctx context.Context, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	listened := map[string]bool{}
	if err := l.sync(ctx, conn, listened); err != nil {
		return err
	}
	connected()
	if err := l.probeOnce(ctx, conn, listened); err != nil {
		return err
	}
	for {
		n, changed, err := l.wait(ctx, conn)
		if err != nil {
			return err
		}
		if n != nil {
			l.deliver(n.Channel, n.Payload)
		}
		if changed {
			if err := l.sync(ctx, conn, listened); err != nil {
				return err
			}
		}
	}
}

// wait returns the next notification, or changed when the dispatchers
// listening changed (and perhaps a notification too). A wait cut short
// leaves the connection usable: pgx ends it with a read deadline, not by
// closing it.
func (l *Listener) wait(ctx context.Context, conn *pgx.Conn) (n *pgconn.Notification, changed bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-l.changed:
			changed = true
			cancel()
		case <-stop:
		}
	}()
	n, err = conn.WaitForNotification(wctx)
	close(stop)
	<-watched
	if err != nil && changed && ctx.Err() == nil {
		return nil, true, nil
	}
	return n, changed, err
}

// sync LISTENs on the channels with dispatchers and UNLISTENs the others
// (listened is what the connection listens on), and tells each dispatcher
// whose channel is newly heard.
func (l *Listener) sync(ctx context.Context, conn *pgx.Conn, listened map[string]bool) error {
	l.mu.Lock()
	var add, drop []string
	for ch := range l.subs {
		if !listened[ch] {
			add = append(add, ch)
		}
	}
	for ch := range listened {
		if l.subs[ch] == nil {
			drop = append(drop, ch)
		}
	}
	l.mu.Unlock()
	for _, ch := range drop {
		if _, err := conn.Exec(ctx, "UNLISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
		delete(listened, ch)
	}
	for _, ch := range add {
		if _, err := conn.Exec(ctx, store.Listen(ch)); err != nil {
			return err
		}
		listened[ch] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch, subs := range l.subs {
		if !listened[ch] {
			continue // subscribed while this ran: the next sync
		}
		for s := range subs {
			if !s.heard {
				// Anything committed while it was not heard is looked
				// for by its next claim.
				s.heard = true
				s.d.listening.Store(true)
				s.d.due.Store(true)
				s.d.signal()
			}
		}
	}
	return nil
}

// deliver wakes the dispatchers of channel.
func (l *Listener) deliver(channel, payload string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs[channel] {
		s.d.notified(payload)
	}
}

// probeOnce sends, on the Listener's first connection, a notification from
// another session on a channel it listens on, and waits for it (see
// probe): behind a transaction pooler notifications never
// arrive, which is said once.
func (l *Listener) probeOnce(ctx context.Context, conn *pgx.Conn, listened map[string]bool) error {
	if len(listened) == 0 {
		return nil // every dispatcher left already: the next connection probes
	}
	l.mu.Lock()
	probed := l.probed
	l.probed = true
	l.mu.Unlock()
	if probed {
		return nil
	}
	return l.probe(ctx, conn, slices.Min(slices.Collect(maps.Keys(listened))))
}

// probeTimeout bounds the wait for the listener's own probe notification.
const probeTimeout = 2 * time.Second

// probe sends a notification on channel from another session, as a
// producer would, and waits for it on conn, which LISTENs there; others
// arriving meanwhile are delivered as usual. Behind a transaction pooler
// LISTEN succeeds but notifications never come back: the relay then only
// polls, which is said once, with the fix.
func (l *Listener) probe(ctx context.Context, conn *pgx.Conn, channel string) error {
	const payload = "outboxd-listener-probe"
	log := l.log
	if err := store.Notify(ctx, l.pool, channel, payload); err != nil {
		log.WarnContext(ctx, "could not send the notification probe", slog.Any("error", err))
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(pctx)
		if err != nil {
			if ctx.Err() != nil || pctx.Err() == nil {
				return err
			}
			attrs := []any{slog.String("channel", channel), slog.Duration("waited", probeTimeout)}
			if l.poll > 0 {
				attrs = append(attrs, slog.Duration("poll_interval", l.poll))
			}
			log.WarnContext(ctx, "notifications do not arrive (a transaction pooler such as PgBouncer in transaction mode?): "+
				"the relay falls back to polling every poll interval; connect the dispatcher to the server directly "+
				"or through session pooling, or run with --no-notify (DisableNotify) to say so", attrs...)
			// Listening goes on: should notifications start to arrive,
			// they wake the dispatcher.
			return nil
		}
		if n.Payload == payload {
			log.DebugContext(ctx, "notification probe arrived", slog.String("channel", channel))
			return nil
		}
		l.deliver(n.Channel, n.Payload)
	}
}
