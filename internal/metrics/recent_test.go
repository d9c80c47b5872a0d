package metrics

import (
	"testing"
	"time"
)

// TestRecentSince: the hour's usage is counted from the newest reading at
// least an hour old, or from the oldest while the process is younger.
func TestRecentSince(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	upload := func(n int) {
		for range n {
			Uploads.WithLabelValues("stored").Inc()
			UploadBytes.Add(10)
		}
	}
	var r Recent
	r.Record(t0)
	upload(2)
	r.Record(t0.Add(30 * time.Minute))
	upload(3)
	r.Record(t0.Add(70 * time.Minute))
	upload(4)
	RouterCalls.WithLabelValues("fal", "ok").Inc()
	RouterCalls.WithLabelValues("fal", "provider_error").Add(2)

	tests := []struct {
		name      string
		now       time.Time
		uploads   float64
		since     time.Time
		routerOK  float64
		routerBad float64
	}{
		{"younger than an hour: from the first reading", t0.Add(50 * time.Minute), 9, t0, 1, 2},
		{"the newest reading an hour old is the base", t0.Add(95 * time.Minute), 7, t0.Add(30 * time.Minute), 1, 2},
		{"exactly an hour", t0.Add(130 * time.Minute), 4, t0.Add(70 * time.Minute), 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, since := r.Since(tt.now)
			if u.Uploads != tt.uploads || u.UploadBytes != 10*tt.uploads || !since.Equal(tt.since) ||
				u.RouterCalls["ok"] != tt.routerOK || u.RouterCalls["provider_error"] != tt.routerBad {
				t.Errorf("Since(%s) = %+v since %s; want %v uploads since %s", tt.now.Sub(t0), u, since.Sub(t0), tt.uploads, tt.since.Sub(t0))
			}
		})
	}
	// Recording drops readings older than the base.
	r.Record(t0.Add(200 * time.Minute))
	if n := len(r.readings); n != 2 {
		t.Errorf("%d readings kept after 200 min; want the base and the newest", n)
	}
}
