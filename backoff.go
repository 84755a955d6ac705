package outbox

import (
	"math/rand/v2"
	"time"
)

// FullJitter returns the "full jitter" backoff for the given attempt:
// a uniform random duration in [0, min(cap, base*2^attempt)], raised to floor
// when floor is larger. Spreading retries uniformly keeps a recovering
// destination from being hit by every backlog message at the same instant.
func FullJitter(attempt int, base, cap, floor time.Duration) time.Duration {
	ceiling := time.Duration(0)
	if base > 0 && cap > 0 {
		ceiling = base
		// Doubling step by step stops at cap, and before a doubling past
		// cap could overflow (cap may be near the largest Duration).
		for i := 0; i < attempt && ceiling < cap; i++ {
			if ceiling > cap/2 {
				ceiling = cap
				break
			}
			ceiling *= 2
		}
		ceiling = min(ceiling, cap)
	}
	d := time.Duration(0)
	if ceiling > 0 {
		// Unsigned, so ceiling+1 cannot overflow when ceiling is the
		// largest Duration.
		d = time.Duration(rand.Uint64N(uint64(ceiling) + 1))
	}
	return max(d, floor)
}
