// Package streamlimit bounds the long-lived connections one account holds
// open in a gateway process: the v2 API's event streams and the ComfyUI
// front's sockets, counted together against the jobs block's max_streams,
// so that the bound an operator sizes a gateway by (connections, their
// goroutines and file descriptors per account) is one number whichever
// front a client uses, and however many sites serve them.
package streamlimit

import "sync"

// Limiter counts open connections per key (an account, or a public
// demo's own key).
type Limiter struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

// New returns a limiter of max connections per key.
func New(max int) *Limiter {
	return &Limiter{max: max, open: map[string]int{}}
}

// Acquire takes one of key's connections, if it has one left. max, when
// positive, replaces the limiter's bound for this key (the public demo's
// own cap). release gives it back; calling it again does nothing.
func (l *Limiter) Acquire(key string, max int) (release func(), ok bool) {
	if max <= 0 {
		max = l.max
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= max {
		return nil, false
	}
	return l.take(key), true
}

// Replace takes one of key's connections for one that replaces an open
// connection of key (a ComfyUI client reconnecting with its client id,
// whose older socket is told to end): it does not wait for the older one
// to give its back, so key holds one more until it does.
func (l *Limiter) Replace(key string) (release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.take(key)
}

// Open is how many connections key holds.
func (l *Limiter) Open(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[key]
}

// take counts one more for key; l.mu is held.
func (l *Limiter) take(key string) (release func()) {
	l.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[key]--; l.open[key] <= 0 {
				delete(l.open, key)
			}
		})
	}
}
