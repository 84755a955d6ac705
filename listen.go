package outbox

import "github.com/outboxd/outbox/internal/store"

// The dispatcher's side of its Listener (listener.go): the wake-ups.

// notified wakes the fetcher for a notification; one saying messages were
// made due earlier (store.NotifyDue) also makes its next claim look again
// at what the dispatcher knows to wait.
func (d *Dispatcher) notified(payload string) {
	switch payload {
	case store.NotifyDue:
		d.due.Store(true)
	case store.NotifyPause:
		d.pauses.changed.Store(true)
	}
	d.stats.wakeups.Add(1)
	d.signal()
}

// signal wakes the fetcher.
func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}
