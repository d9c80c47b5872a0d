package deployments

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimiter allows each key (a client address on one deployment) a
// number of events per window, as a token bucket that refills evenly and
// holds at most the whole allowance. It lives in one process: each gateway
// process counts its own clients.
type RateLimiter struct {
	limit rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// NewRateLimiter allows n events per window for each key.
func NewRateLimiter(n int, window time.Duration) *RateLimiter {
	return &RateLimiter{limit: rate.Limit(float64(n) / window.Seconds()), burst: n, now: time.Now,
		buckets: map[string]*bucket{}}
}

// Allow takes one event for key. When the key is over its allowance it
// takes nothing and returns how many whole seconds (at least 1) until it
// may try again.
func (l *RateLimiter) Allow(key string) (ok bool, retryAfter int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	if b.lim.AllowN(now, 1) {
		return true, 0
	}
	r := b.lim.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	return false, max(1, int(math.Ceil(wait.Seconds())))
}

// sweep forgets buckets idle long enough to be full again, at most once a
// refill period, so that many one-off clients cost no memory for long.
func (l *RateLimiter) sweep(now time.Time) {
	full := time.Duration(float64(l.burst) / float64(l.limit) * float64(time.Second))
	if now.Sub(l.swept) < full {
		return
	}
	l.swept = now
	for k, b := range l.buckets {
		if now.Sub(b.seen) >= full {
			delete(l.buckets, k)
		}
	}
}
