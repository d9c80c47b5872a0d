package comfyui

import (
	"context"
	"sync"
	"time"
)

// RecordReconnectSleeps (tests only) makes reconnect waits return at once after noting
// their length, until n were seen; then they block until ctx ends. It
// returns the lengths seen and a restore function.
func RecordReconnectSleeps(n int) (seen func() []time.Duration, done <-chan struct{}, restore func()) {
	var mu sync.Mutex
	var got []time.Duration
	full := make(chan struct{})
	reconnectSleep = func(ctx context.Context, d time.Duration) bool {
		mu.Lock()
		if len(got) < n {
			got = append(got, d)
			if len(got) == n {
				close(full)
			}
			mu.Unlock()
			return ctx.Err() == nil
		}
		mu.Unlock()
		<-ctx.Done()
		return false
	}
	return func() []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return append([]time.Duration(nil), got...)
		}, full, func() {
			reconnectSleep = sleepCtx
		}
}

// SetPingTiming (tests only) changes how often sockets are pinged and how
// long a pong may take; restore puts the defaults back.
func SetPingTiming(interval, timeout time.Duration) (restore func()) {
	oldInterval, oldTimeout := pingInterval, pingTimeout
	pingInterval, pingTimeout = interval, timeout
	return func() { pingInterval, pingTimeout = oldInterval, oldTimeout }
}
