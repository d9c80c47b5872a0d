package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Usage is what this process did, read from the series above: uploads
// and router calls.
type Usage struct {
	Uploads      float64 `json:"uploads"`
	Deduplicated float64 `json:"deduplicated"`
	UploadBytes  float64 `json:"upload_bytes"`
	// UploadRefusals are refused uploads by error code.
	UploadRefusals map[string]float64 `json:"upload_refusals"`
	// RouterCalls are router calls by bucket ("ok" for successes).
	RouterCalls        map[string]float64 `json:"router_calls"`
	RouterSettledCents float64            `json:"router_settled_cents"`
}

// ReadUsage reads the counters now.
func ReadUsage() Usage {
	u := Usage{UploadBytes: value(UploadBytes), RouterSettledCents: value(RouterSpendSettled),
		UploadRefusals: sumBy(UploadRefusals, "code"), RouterCalls: sumBy(RouterCalls, "bucket")}
	outcomes := sumBy(Uploads, "outcome")
	u.Uploads = outcomes["stored"] + outcomes["deduplicated"]
	u.Deduplicated = outcomes["deduplicated"]
	return u
}

// Minus is u less an earlier reading.
func (u Usage) Minus(before Usage) Usage {
	d := Usage{Uploads: u.Uploads - before.Uploads, Deduplicated: u.Deduplicated - before.Deduplicated,
		UploadBytes: u.UploadBytes - before.UploadBytes, RouterSettledCents: u.RouterSettledCents - before.RouterSettledCents,
		UploadRefusals: map[string]float64{}, RouterCalls: map[string]float64{}}
	for k, v := range u.UploadRefusals {
		if n := v - before.UploadRefusals[k]; n != 0 {
			d.UploadRefusals[k] = n
		}
	}
	for k, v := range u.RouterCalls {
		if n := v - before.RouterCalls[k]; n != 0 {
			d.RouterCalls[k] = n
		}
	}
	return d
}

// Recent keeps a reading of Usage per minute for the last hour, so that
// the console shows the last hour's uploads and router calls from the same
// counters /metrics serves.
type Recent struct {
	mu       sync.Mutex
	readings []reading // oldest first
}

type reading struct {
	at    time.Time
	usage Usage
}

// LastHour is the process's record, kept by the comfygate app (one per
// process, like the counters, so that a reload keeps the hour).
var LastHour = &Recent{}

// window is how far back LastHour reaches.
const window = time.Hour

// Record keeps a reading taken at now and drops those no longer needed.
func (r *Recent) Record(now time.Time) {
	u := ReadUsage()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readings = append(r.readings, reading{at: now, usage: u})
	// Keep the newest reading at least an hour old: it is the baseline.
	for len(r.readings) > 1 && now.Sub(r.readings[1].at) >= window {
		r.readings = r.readings[1:]
	}
}

// Since is the usage since the newest reading at least an hour before now
// (or since the oldest, when this process is younger), and since when.
func (r *Recent) Since(now time.Time) (Usage, time.Time) {
	current := ReadUsage()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.readings) == 0 {
		return current, now
	}
	base := r.readings[0]
	for _, rd := range r.readings[1:] {
		if now.Sub(rd.at) < window {
			break
		}
		base = rd
	}
	return current.Minus(base.usage), base.at
}

// value reads a single counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// sumBy sums a counter vector's children by the value of one label.
func sumBy(vec *prometheus.CounterVec, label string) map[string]float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		vec.Collect(ch)
		close(ch)
	}()
	sums := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		for _, lp := range d.GetLabel() {
			if lp.GetName() == label {
				sums[lp.GetValue()] += d.GetCounter().GetValue()
			}
		}
	}
	return sums
}
