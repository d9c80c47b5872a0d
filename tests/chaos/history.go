package chaos

import (
	"encoding/json"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Op names a kind of request of the workload.
type Op string

// The workload's operations.
const (
	OpUpload Op = "upload"
	OpSubmit Op = "submit"
	OpPoll   Op = "poll"
	OpCancel Op = "cancel"
	OpEvents Op = "events"
	OpRoute  Op = "route"
	OpDelete Op = "delete"
)

// Entry is one request and its answer.
type Entry struct {
	Op      Op
	Gateway int
	// Logical names the client's intention (one upload, one submit, one
	// router call), shared by its retries; Key is its Idempotency-Key, ""
	// when it went without one.
	Logical, Key string
	Attempt      int
	Start, End   time.Time
	// Status is the HTTP status, 0 when no answer came (Err says why).
	Status int
	Err    string
	// Code is the error envelope's code (v2) or X-Service-Error-Type
	// (router); Enveloped whether an error answer carried it properly.
	Code      string
	Enveloped bool
	// ID is the asset or job the answer names (for a delete, the asset it
	// deletes); JobStatus a job's status in it; Statuses the status events
	// a stream delivered, in order.
	ID        string
	JobStatus string
	Statuses  []string
	// Fault says a fault was being injected when the request started.
	Fault bool
}

// OK reports a 2xx answer.
func (e Entry) OK() bool { return e.Status >= 200 && e.Status < 300 }

// History is the workload's record, safe for concurrent use.
type History struct {
	mu      sync.Mutex
	entries []Entry
	fault   atomic.Bool
	// uploads maps an upload's Logical to the bytes it sent.
	uploads map[string][]byte
	// seeds are the assets the stack held before the workload began.
	seeds []Seed
}

// Seed is an asset the stack held before the workload: what the release
// before held in its bucket and database.
type Seed struct {
	ID   string
	Data []byte
}

// NewHistory returns an empty history.
func NewHistory() *History { return &History{uploads: map[string][]byte{}} }

// AddSeed records an asset that was there before the workload.
func (h *History) AddSeed(s Seed) {
	h.mu.Lock()
	h.seeds = append(h.seeds, s)
	h.mu.Unlock()
}

// Seeds returns the assets that were there before the workload.
func (h *History) Seeds() []Seed {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Seed(nil), h.seeds...)
}

// SetFault marks the requests that start from now on as under a fault or not.
func (h *History) SetFault(on bool) { h.fault.Store(on) }

// Faulty reports whether a fault is being injected.
func (h *History) Faulty() bool { return h.fault.Load() }

// Add records e.
func (h *History) Add(e Entry) {
	h.mu.Lock()
	h.entries = append(h.entries, e)
	h.mu.Unlock()
}

// Upload records the bytes an upload sends.
func (h *History) Upload(logical string, data []byte) {
	h.mu.Lock()
	h.uploads[logical] = data
	h.mu.Unlock()
}

// Entries returns the history sorted by end time.
func (h *History) Entries() []Entry {
	h.mu.Lock()
	out := append([]Entry(nil), h.entries...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].End.Before(out[j].End) })
	return out
}

// UploadData returns the bytes of an upload.
func (h *History) UploadData(logical string) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.uploads[logical]
}

// JSON is the history as JSON lines' worth of entries, for a failed test's log.
func (h *History) JSON() []byte {
	b, _ := json.Marshal(h.Entries())
	return b
}
