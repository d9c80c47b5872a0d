// Package bus fans job events out to the streams that watch them. A Hub
// delivers in process; Redis (package redisbus) carries events between
// gateway processes and feeds each process's Hub, so a stream on one process
// sees a job run by another.
//
// Delivery is best effort: a subscriber that falls behind loses events and
// is told so (Lagged), and is expected to re-read the job from storage,
// which is the truth. Streams never depend on the bus alone.
package bus

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
)

// Event is one job event.
type Event struct {
	// JobID names the job.
	JobID string `json:"job_id"`
	// Kind is "status", "progress", "preview", "output", or "queued" (a new
	// job for Pool; used to wake dispatchers).
	Kind string `json:"kind"`
	// Pool is set on queued events.
	Pool string `json:"pool,omitempty"`
	// Data is the event's JSON payload.
	Data json.RawMessage `json:"data,omitempty"`
}

// Bus publishes events and lets streams subscribe to one job's events.
type Bus interface {
	// Publish sends e to every subscriber of e.JobID, in every process.
	Publish(ctx context.Context, e Event) error
	// Subscribe returns a subscription to jobID's events.
	Subscribe(jobID string) *Subscription
	// SubscribeQueued returns a subscription to every queued event.
	SubscribeQueued() *Subscription
	// LatestPreview returns the newest preview of a running job.
	LatestPreview(jobID string) (Event, bool)
	// Close stops delivery.
	Close() error
}

// queuedKey is the subscription key of queued events.
const queuedKey = "\x00queued"

// Subscription receives events until Cancel.
type Subscription struct {
	// C delivers events; it is never closed (select on it with a done channel).
	C      chan Event
	lagged atomic.Bool
	hub    *Hub
	key    string
}

// Lagged reports (and clears) whether events were dropped because C was full.
func (s *Subscription) Lagged() bool { return s.lagged.Swap(false) }

// Cancel ends the subscription.
func (s *Subscription) Cancel() { s.hub.remove(s) }

// subscriptionBuffer is how many events a slow subscriber may fall behind
// before it is marked lagged (and re-reads storage). It is small because
// every open stream holds one.
const subscriptionBuffer = 16

// maxPreviews bounds how many jobs' latest previews a hub remembers.
const maxPreviews = 1024

// Hub is the in-process fan-out. It also remembers the latest preview of
// each running job, so that a stream opened mid-run starts with it.
type Hub struct {
	mu       sync.RWMutex
	subs     map[string]map[*Subscription]struct{}
	previews map[string]Event
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{subs: map[string]map[*Subscription]struct{}{}, previews: map[string]Event{}}
}

// LatestPreview returns the newest preview event of a job, if any.
func (h *Hub) LatestPreview(jobID string) (Event, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	e, ok := h.previews[jobID]
	return e, ok
}

// remember keeps a job's newest preview and forgets it when the job ends.
func (h *Hub) remember(e Event) {
	switch e.Kind {
	case "preview":
		h.mu.Lock()
		if _, known := h.previews[e.JobID]; !known && len(h.previews) >= maxPreviews {
			for id := range h.previews { // drop an arbitrary one; previews are hints
				delete(h.previews, id)
				break
			}
		}
		h.previews[e.JobID] = e
		h.mu.Unlock()
	case "status":
		var s struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(e.Data, &s) == nil && terminal(s.Status) {
			h.mu.Lock()
			delete(h.previews, e.JobID)
			h.mu.Unlock()
		}
	}
}

func terminal(status string) bool {
	switch status {
	case "succeeded", "canceled", "failed", "expired":
		return true
	}
	return false
}

// Deliver hands e to this process's subscribers.
func (h *Hub) Deliver(e Event) {
	h.remember(e)
	key := e.JobID
	if e.Kind == "queued" {
		key = queuedKey
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for s := range h.subs[key] {
		select {
		case s.C <- e:
		default:
			s.lagged.Store(true)
		}
	}
}

func (h *Hub) add(key string) *Subscription {
	s := &Subscription{C: make(chan Event, subscriptionBuffer), hub: h, key: key}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.subs[key]
	if m == nil {
		m = map[*Subscription]struct{}{}
		h.subs[key] = m
	}
	m[s] = struct{}{}
	return s
}

func (h *Hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.subs[s.key]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(h.subs, s.key)
		}
	}
}

// Subscribers returns how many subscriptions are open (for tests and metrics).
func (h *Hub) Subscribers() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for _, m := range h.subs {
		n += len(m)
	}
	return n
}

// Subscribe implements Bus.
func (h *Hub) Subscribe(jobID string) *Subscription { return h.add(jobID) }

// SubscribeQueued implements Bus.
func (h *Hub) SubscribeQueued() *Subscription { return h.add(queuedKey) }

// Publish implements Bus for a single process.
func (h *Hub) Publish(_ context.Context, e Event) error {
	h.Deliver(e)
	return nil
}

// Close implements Bus.
func (h *Hub) Close() error { return nil }

var _ Bus = (*Hub)(nil)
