package outbox

import (
	"container/heap"
	"sync"
	"time"
)

// dueTimes are when the retries and defers a dispatcher wrote come due,
// so that an idle fetcher backing off its polls still claims each on time:
// the earliest is next, and soon is signalled whenever a new one comes
// before every other, so a fetcher already asleep wakes for it.
type dueTimes struct {
	mu   sync.Mutex
	at   unixHeap
	soon chan struct{} // capacity 1
}

func newDueTimes() *dueTimes { return &dueTimes{soon: make(chan struct{}, 1)} }

// maxDueTimes bounds the times kept; past it, those gone by are dropped
// (a busy fetcher claims them anyway).
const maxDueTimes = 4096

// add records that a message comes due at t.
func (d *dueTimes) add(t time.Time) {
	n := t.UnixNano()
	d.mu.Lock()
	if len(d.at) >= maxDueTimes {
		d.dropLocked(time.Now().UnixNano())
	}
	first := len(d.at) == 0 || n < d.at[0]
	heap.Push(&d.at, n)
	d.mu.Unlock()
	if first {
		select {
		case d.soon <- struct{}{}:
		default:
		}
	}
}

// next is the earliest time kept, and whether there is one.
func (d *dueTimes) next() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.at) == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, d.at[0]), true
}

// drop forgets the times at or before now and reports whether there were
// any.
func (d *dueTimes) drop(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropLocked(now.UnixNano())
}

func (d *dueTimes) dropLocked(now int64) bool {
	dropped := false
	for len(d.at) > 0 && d.at[0] <= now {
		heap.Pop(&d.at)
		dropped = true
	}
	return dropped
}

// unixHeap is a min-heap of Unix nanoseconds.
type unixHeap []int64

func (h unixHeap) Len() int           { return len(h) }
func (h unixHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h unixHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *unixHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *unixHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
