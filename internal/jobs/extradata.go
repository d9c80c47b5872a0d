package jobs

import (
	"sync"
	"time"
)

// ExtraDataCache holds submitted extra_data (partner API keys) in memory
// only, from submission until the job ends, and for at most ttl. The contract forbids persisting it; the price is that a job
// dispatched by another process, or after a restart, runs without it.
type ExtraDataCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]extraEntry
}

type extraEntry struct {
	data    map[string]string
	expires time.Time
}

// NewExtraDataCache returns an empty cache whose entries live at most ttl.
func NewExtraDataCache(ttl time.Duration) *ExtraDataCache {
	return &ExtraDataCache{ttl: ttl, m: map[string]extraEntry{}}
}

// Put stores a job's extra_data.
func (c *ExtraDataCache) Put(jobID string, data map[string]string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for id, e := range c.m {
		if now.After(e.expires) {
			delete(c.m, id)
		}
	}
	c.m[jobID] = extraEntry{data: data, expires: now.Add(c.ttl)}
}

// Get returns a job's extra_data, if still held.
func (c *ExtraDataCache) Get(jobID string) map[string]string {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[jobID]
	if !ok || time.Now().After(e.expires) {
		return nil
	}
	return e.data
}

// Delete forgets a job's extra_data.
func (c *ExtraDataCache) Delete(jobID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, jobID)
}
