package amqpsink

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outbox"
)

// session is one live connection and its pool of confirm-mode channels.
type session struct {
	conn  *amqp.Connection
	slots []atomic.Pointer[pchan] // nil while that channel is being reopened
	next  atomic.Uint32

	done chan struct{} // closed once the connection is gone
	err  *amqp.Error   // why; set before done is closed

	blocked atomic.Pointer[string] // the broker's reason while it blocks publishing

	wg sync.WaitGroup
}

// pick reserves id on the next open channel, round robin. busy reports that
// every open channel already has a publish of id awaiting its confirm.
func (ss *session) pick(id string) (pc *pchan, busy bool) {
	n := uint32(len(ss.slots))
	start := ss.next.Add(1)
	open := 0
	for i := range n {
		pc := ss.slots[(start+i)%n].Load()
		if pc == nil {
			continue
		}
		ok, dup := pc.acquire(id)
		if ok {
			return pc, false
		}
		if dup {
			open++
		}
	}
	return nil, open > 0
}

// run keeps the sink connected until it is closed: connect, serve until the
// connection drops, back off, connect again.
func (s *Sink) run() {
	defer s.wg.Done()
	defer s.settle(nil)
	failures, configFailures := 0, 0
	for {
		s.beginAttempt()
		ss, err := s.connect()
		if err != nil {
			if s.ctx.Err() != nil {
				s.setDown(nil, outbox.Retryable(errClosed))
				return
			}
			delay := s.attemptFailed(err, &failures, &configFailures)
			if !s.sleep(delay) {
				s.setDown(nil, outbox.Retryable(errClosed))
				return
			}
			continue
		}
		if failures > 0 {
			s.log.Info("amqpsink: connected", slog.String("broker", s.cfg.display), slog.Int("after_failures", failures))
		}
		failures, configFailures = 0, 0
		s.setDown(ss, nil)
		s.settle(nil)

		select {
		case <-ss.done:
			s.setDown(nil, outbox.Retryable(fmt.Errorf("amqpsink: connection to %s lost: %w", s.cfg.display, ss.err)))
			s.log.Warn("amqpsink: connection lost; reconnecting", slog.String("broker", s.cfg.display), slog.Any("error", ss.err))
			ss.wg.Wait()
		case <-s.ctx.Done():
			s.setDown(nil, outbox.Retryable(errClosed))
			_ = ss.conn.CloseDeadline(time.Now().Add(s.cfg.connTO))
			ss.wg.Wait()
			return
		}
	}
}

// attemptFailed records a failed connection attempt (counted in failures,
// and in configFailures when the broker refused the configuration), marks
// the sink down accordingly and returns the delay before the next attempt.
func (s *Sink) attemptFailed(err error, failures, configFailures *int) time.Duration {
	// A socket reset in the middle of the handshake can look like
	// refused credentials (the broker closes the socket on bad
	// credentials without a word), so once the sink is running, when
	// the verdict pauses the sink, a config error is believed only
	// when the next attempt says the same. At start-up it only
	// fails New, and fast feedback matters more.
	switch {
	case !isConfigError(err):
		*configFailures = 0
	case s.isSettled():
		(*configFailures)++
	default:
		*configFailures = 2
	}
	(*failures)++
	wrapped := fmt.Errorf("amqpsink: connecting to %s: %w", s.cfg.display, err)
	delay := backoff(*failures, s.cfg.reconnMax)
	if *configFailures >= 2 {
		// The broker refuses the sink, not a message: messages keep
		// their attempts until the configuration is fixed.
		s.setDown(nil, outbox.Unavailable(wrapped))
		s.settle(wrapped)
	} else {
		s.setDown(nil, outbox.Retryable(wrapped))
		s.settle(nil)
	}
	s.log.Warn("amqpsink: connection attempt failed", slog.String("broker", s.cfg.display),
		slog.Int("failures", *failures), slog.Duration("retry_in", delay), slog.Any("error", err))
	return delay
}

// connect dials the broker and opens the channel pool, all within one
// connection_timeout, and abandons the attempt at once if the sink closes.
func (s *Sink) connect() (*session, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.connTO)
	defer cancel()
	conn, err := s.dialBroker(ctx)
	if err != nil {
		return nil, err
	}
	ss := &session{conn: conn, slots: make([]atomic.Pointer[pchan], s.cfg.channels), done: make(chan struct{})}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	chans, err := s.openChannels(ctx, conn)
	if err != nil {
		return nil, err
	}
	ss.wg.Add(1 + len(chans))
	go ss.watch(closes, blocks, s.log)
	for i, pc := range chans {
		ss.slots[i].Store(pc)
		go s.keepChannel(ss, i, pc)
	}
	return ss, nil
}

// dialBroker opens the connection: TCP, TLS and the AMQP handshake, all
// bounded by ctx.
func (s *Sink) dialBroker(ctx context.Context) (*amqp.Connection, error) {
	// The library has no context: the handshake is bounded by a deadline on
	// the socket, pulled in to now if ctx ends first.
	var stopDeadline func() bool
	cfg := amqp.Config{
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			deadline, _ := ctx.Deadline()
			if err := c.SetDeadline(deadline); err != nil {
				_ = c.Close()
				return nil, err
			}
			stopDeadline = context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
			return c, nil
		},
		Properties: amqp.NewConnectionProperties(),
		Locale:     "en_US",
	}
	cfg.Properties.SetClientConnectionName(s.connName)
	if s.tlsConfig != nil {
		// The library writes ServerName into the config it is given.
		cfg.TLSClientConfig = s.tlsConfig.Clone()
	}
	conn, err := amqp.DialConfig(s.cfg.dialURL, cfg)
	if stopDeadline != nil && !stopDeadline() && err == nil {
		_ = conn.CloseDeadline(time.Now())
		return nil, fmt.Errorf("handshake: %w", context.Cause(ctx))
	}
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return conn, err
}

// openChannels opens the sink's channels on conn, closing conn when one
// fails or ctx ends first.
func (s *Sink) openChannels(ctx context.Context, conn *amqp.Connection) ([]*pchan, error) {
	// Opening channels are plain RPCs; closing the connection is what
	// unblocks them when the attempt runs out of time.
	stopClose := context.AfterFunc(ctx, func() { _ = conn.CloseDeadline(time.Now()) })
	chans := make([]*pchan, s.cfg.channels)
	var err error
	for i := range chans {
		if chans[i], err = openChannel(conn); err != nil {
			break
		}
	}
	if !stopClose() && err == nil {
		err = fmt.Errorf("opening channels: %w", context.Cause(ctx))
	}
	if err != nil {
		_ = conn.CloseDeadline(time.Now())
		return nil, err
	}
	return chans, nil
}

// watch follows the connection: blocked/unblocked notices, and its end.
func (ss *session) watch(closes chan *amqp.Error, blocks chan amqp.Blocking, log *slog.Logger) {
	defer ss.wg.Done()
	for closes != nil {
		select {
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			if b.Active {
				reason := b.Reason
				ss.blocked.Store(&reason)
				log.Warn("amqpsink: broker blocked publishing", slog.String("reason", reason))
			} else {
				ss.blocked.Store(nil)
				log.Info("amqpsink: broker unblocked publishing")
			}
		case e, ok := <-closes:
			if !ok {
				closes = nil
				continue
			}
			ss.err = e
		}
	}
	if ss.err == nil {
		ss.err = amqp.ErrClosed
	}
	close(ss.done)
}

// keepChannel serves slot i and reopens its channel whenever the broker
// closes it while the connection lives on (a channel exception, such as a
// publish to a missing exchange, kills only the channel).
func (s *Sink) keepChannel(ss *session, i int, pc *pchan) {
	defer ss.wg.Done()
	for attempt := 0; ; {
		if pc != nil {
			ss.slots[i].Store(pc)
			s.broadcast()
			pc.serve()
			ss.slots[i].CompareAndSwap(pc, nil)
			if ss.conn.IsClosed() || s.ctx.Err() != nil {
				return
			}
			s.log.Warn("amqpsink: broker closed a channel; reopening it", slog.Any("error", pc.closeErr))
			attempt = 0
		}
		var err error
		if pc, err = openChannel(ss.conn); err == nil {
			continue
		}
		if ss.conn.IsClosed() {
			return
		}
		attempt++
		s.log.Warn("amqpsink: reopening a channel failed", slog.Int("attempt", attempt), slog.Any("error", err))
		select {
		case <-time.After(backoff(attempt, s.cfg.reconnMax)):
		case <-ss.done:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// backoff is the delay before reconnection attempt n+1 after n failures:
// doubling from ReconnectMin up to limit, with jitter so that many sinks
// restarted together do not reconnect in lockstep.
func backoff(n int, limit time.Duration) time.Duration {
	d := ReconnectMin << min(n-1, 20)
	d = min(d, limit)
	return d/2 + rand.N(d/2+1)
}

func (s *Sink) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// setDown publishes the sink's state: a live session, or the error that
// publishes get while there is none.
func (s *Sink) setDown(ss *session, err error) {
	s.mu.Lock()
	s.sess, s.downErr, s.connecting = ss, err, false
	s.mu.Unlock()
	s.broadcast()
}

// beginAttempt marks a connection attempt under way: publishes wait for
// its outcome (setDown), bounded by their context.
func (s *Sink) beginAttempt() {
	s.mu.Lock()
	s.connecting = true
	s.mu.Unlock()
}

// broadcast wakes every publish waiting for the state to change.
func (s *Sink) broadcast() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func (s *Sink) isSettled() bool {
	select {
	case <-s.settled:
		return true
	default:
		return false
	}
}

// settle tells New that the first connection attempt has an outcome, and
// whether New must fail with err. Later calls do nothing.
func (s *Sink) settle(err error) {
	s.settleOnce.Do(func() {
		s.startErr = err
		close(s.settled)
	})
}

// state returns the current session (nil while down), the error for
// publishes while down, and a channel closed at the next change.
func (s *Sink) state() (*session, error, <-chan struct{}) { //nolint:staticcheck // ST1008: downErr is a value to hand on, not this call's failure
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connecting {
		return s.sess, nil, s.changed
	}
	return s.sess, s.downErr, s.changed
}
