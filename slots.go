package outbox

import "sync"

// slots is the dispatcher's in-flight capacity: a counting semaphore over
// the rows it holds, from their claim until their outcome is written. The
// fetcher takes slots for the rows a claim returned; the completer gives
// them back after each finalize, and every give-back fires released, which
// wakes a fetcher waiting for room, a sink probe's wait and, in ordered
// mode, an idle fetcher (a finalize may free an aggregate's next message).
type slots struct {
	size int64

	mu   sync.Mutex
	held int64
	// freed holds one token once slots were given back since the last
	// receive (capacity 1: a signal, not a count).
	freed chan struct{}
}

func newSlots(size int) *slots {
	return &slots{size: int64(size), freed: make(chan struct{}, 1)}
}

// inUse is how many slots are taken.
func (s *slots) inUse() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// room is how many rows the next claim may ask for: what the claim sizer
// allows within the semaphore's size, given the slots in use.
func (s *slots) room(sizer *claimSizer, batch int) int64 {
	return sizer.claimRoom(s.size, s.inUse(), batch)
}

// take records n claimed rows. A claim is never larger than room, so the
// slots in use stay within size.
func (s *slots) take(n int) {
	s.mu.Lock()
	s.held += int64(n)
	s.mu.Unlock()
}

// give returns n slots and signals released.
func (s *slots) give(n int) {
	s.mu.Lock()
	s.held -= int64(n)
	s.mu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// released fires after slots were given back.
func (s *slots) released() <-chan struct{} { return s.freed }
