package sinktest

import (
	"sync"
	"testing"
	"time"
)

// Collector is a [Receiver] for destinations that push what arrives (a
// webhook server, a subscription): the harness adds each message as it
// arrives, and Receive waits on the arrivals themselves, not on a timer.
type Collector struct {
	mu   sync.Mutex
	got  []Received
	read int // how many earlier calls to Receive returned
	// arrived holds one token once a message arrived since the last
	// receive: a signal, not a count.
	arrived chan struct{}
}

// NewCollector returns an empty collector.
func NewCollector() *Collector { return &Collector{arrived: make(chan struct{}, 1)} }

// Add records a message that arrived; it may be called from any goroutine.
func (c *Collector) Add(r Received) {
	c.mu.Lock()
	c.got = append(c.got, r)
	c.mu.Unlock()
	select {
	case c.arrived <- struct{}{}:
	default:
	}
}

// All returns every message that arrived, in arrival order.
func (c *Collector) All() []Received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Received(nil), c.got...)
}

// Receive implements [Receiver]: it waits up to timeout for n messages
// that arrived since the previous call, and returns them.
func (c *Collector) Receive(t *testing.T, n int, timeout time.Duration) []Received {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		if len(c.got)-c.read >= n {
			out := append([]Received(nil), c.got[c.read:]...)
			c.read = len(c.got)
			c.mu.Unlock()
			return out
		}
		c.mu.Unlock()
		select {
		case <-c.arrived:
		case <-deadline.C:
			c.mu.Lock()
			defer c.mu.Unlock()
			out := append([]Received(nil), c.got[c.read:]...)
			c.read = len(c.got)
			return out
		}
	}
}
