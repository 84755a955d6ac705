package console

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// signInLimiter is a token bucket per client address for the sign-in form:
// each attempt takes a token, a full bucket holds burst, and one token comes
// back every refill.
type signInLimiter struct {
	mu      sync.Mutex
	burst   float64
	refill  time.Duration
	now     func() time.Time
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxBuckets bounds the limiter's memory; past it, full buckets are dropped.
const maxBuckets = 10000

func newSignInLimiter(burst int, refill time.Duration) *signInLimiter {
	return &signInLimiter{burst: float64(burst), refill: refill, now: time.Now, buckets: map[string]*bucket{}}
}

// allow takes a token for addr, or returns how long until one is back.
func (l *signInLimiter) allow(addr string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[addr]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.pruneLocked(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[addr] = b
	}
	l.fillLocked(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.refill))
}

// spent reports whether addr has no token left, and how long until one is
// back, without taking one.
func (l *signInLimiter) spent(addr string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[addr]
	if b == nil {
		return false, 0
	}
	l.fillLocked(b, l.now())
	if b.tokens >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - b.tokens) * float64(l.refill))
}

func (l *signInLimiter) fillLocked(b *bucket, now time.Time) {
	b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.refill))
	b.at = now
}

func (l *signInLimiter) pruneLocked(now time.Time) {
	for k, b := range l.buckets {
		if l.fillLocked(b, now); b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// clientAddr is the request's peer address without the port (the console
// does not trust forwarding headers).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// retryAfter is wait as a Retry-After value: whole seconds, at least 1.
func retryAfter(wait time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(wait.Seconds()))))
}
