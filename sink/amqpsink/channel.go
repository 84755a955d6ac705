package amqpsink

import (
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outbox"
)

// Buffer sizes of the notification channels the client library writes to
// from its connection reader. The library gives up on a send that blocks for
// 5 s, and a dropped basic.return would turn an unroutable message into a
// success, so serve never blocks and the buffers absorb bursts.
const (
	confirmBuffer = 1024
	returnBuffer  = 256
)

// pchan is one AMQP channel in confirm mode and the bookkeeping that ties
// the broker's confirms and returns back to the publishes waiting for them.
//
// Delivery tags come from the library when a publish is written, and its
// confirm can be read by serve before the publisher gets to register the
// tag: such a confirm waits in early. A basic.return carries no tag, only the
// message, so it is matched by message id; that is why one message id is
// never in flight twice on the same channel (see acquire).
type pchan struct {
	ch *amqp.Channel

	// Read by serve only.
	returns  chan amqp.Return
	confirms chan amqp.Confirmation
	closes   chan *amqp.Error

	mu       sync.Mutex
	inflight map[string]struct{}    // message ids published or about to be
	waiters  map[uint64]*waiter     // delivery tag -> publish awaiting its confirm
	early    map[uint64]bool        // confirms read before their tag was registered
	returned map[string]amqp.Return // returns whose confirm has not been read yet
	finished bool                   // no confirm will come any more
	closeErr *amqp.Error            // why the channel closed; nil for our own close
}

// waiter is one publish awaiting its confirm.
type waiter struct {
	id       string
	exchange string
	key      string
	size     int
	done     chan error // buffered: serve never waits for a publisher that gave up
}

// openChannel opens a channel on conn and puts it in confirm mode. The
// listeners are registered before Confirm so no notification can be missed.
func openChannel(conn *amqp.Connection) (*pchan, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("opening a channel: %w", err)
	}
	pc := &pchan{
		ch:       ch,
		returns:  ch.NotifyReturn(make(chan amqp.Return, returnBuffer)),
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, confirmBuffer)),
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		inflight: map[string]struct{}{},
		waiters:  map[uint64]*waiter{},
		early:    map[uint64]bool{},
		returned: map[string]amqp.Return{},
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("enabling publisher confirms: %w", err)
	}
	return pc, nil
}

// serve reads the library's notifications until the channel is closed, then
// fails every publish still waiting. It never blocks on anything but them.
func (pc *pchan) serve() {
	returns, confirms, closes := pc.returns, pc.confirms, pc.closes
	for returns != nil || confirms != nil || closes != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			pc.addReturn(r)
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			// The broker sends basic.return before the ack of the same
			// message, and the library hands both over in that order, so
			// every return for this message is queued by now: take them
			// first, or select could see the ack first.
			for drained := false; !drained && returns != nil; {
				select {
				case r, ok := <-returns:
					if !ok {
						returns = nil
					} else {
						pc.addReturn(r)
					}
				default:
					drained = true
				}
			}
			pc.confirm(c)
		case e, ok := <-closes:
			if !ok {
				closes = nil
				continue
			}
			pc.mu.Lock()
			pc.closeErr = e
			pc.mu.Unlock()
		}
	}
	pc.finish()
}

func (pc *pchan) addReturn(r amqp.Return) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if _, ok := pc.inflight[r.MessageId]; ok {
		pc.returned[r.MessageId] = r
	}
}

func (pc *pchan) confirm(c amqp.Confirmation) {
	pc.mu.Lock()
	w, ok := pc.waiters[c.DeliveryTag]
	if !ok {
		pc.early[c.DeliveryTag] = c.Ack
		pc.mu.Unlock()
		return
	}
	delete(pc.waiters, c.DeliveryTag)
	err := pc.resolveLocked(w, c.Ack)
	pc.mu.Unlock()
	w.done <- err
}

// finish runs once the library has closed every notification channel: the
// confirms that were going to arrive have been read, so whatever still waits
// will never be confirmed.
func (pc *pchan) finish() {
	pc.mu.Lock()
	pc.finished = true
	waiters := pc.waiters
	pc.waiters = map[uint64]*waiter{}
	errs := make(map[*waiter]error, len(waiters))
	for _, w := range waiters {
		errs[w] = pc.failLocked(w)
	}
	pc.mu.Unlock()
	for w, err := range errs {
		w.done <- err
	}
}

// acquire reserves id on this channel. It fails when the channel is done or
// when an earlier publish of the same message (one whose caller gave up
// waiting) is still awaiting its confirm here: the two returns would be
// indistinguishable.
func (pc *pchan) acquire(id string) (ok, busy bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.finished || pc.ch.IsClosed() {
		return false, false
	}
	if _, dup := pc.inflight[id]; dup {
		return false, true
	}
	pc.inflight[id] = struct{}{}
	return true, false
}

// release undoes acquire for a publish that never reached the wire.
func (pc *pchan) release(id string) {
	pc.mu.Lock()
	delete(pc.inflight, id)
	pc.mu.Unlock()
}

// register hands w to serve under the delivery tag the library gave the
// publish. When the outcome is already known (its confirm was early, or the
// channel is finished) it is returned with now set.
func (pc *pchan) register(tag uint64, w *waiter) (err error, now bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if ack, ok := pc.early[tag]; ok {
		delete(pc.early, tag)
		return pc.resolveLocked(w, ack), true
	}
	if pc.finished {
		return pc.failLocked(w), true
	}
	pc.waiters[tag] = w
	return nil, false
}

func (pc *pchan) resolveLocked(w *waiter, ack bool) error {
	delete(pc.inflight, w.id)
	r, returned := pc.returned[w.id]
	delete(pc.returned, w.id)
	switch {
	case !ack:
		return outbox.Retryable(errNacked)
	case returned:
		return outbox.Permanent(fmt.Errorf("amqpsink: broker returned the message as unroutable (exchange %q, routing key %q): %d %s",
			w.exchange, w.key, r.ReplyCode, r.ReplyText))
	default:
		return nil
	}
}

func (pc *pchan) failLocked(w *waiter) error {
	delete(pc.inflight, w.id)
	delete(pc.returned, w.id)
	return classifyClose(pc.closeErr, w.exchange, w.size)
}
