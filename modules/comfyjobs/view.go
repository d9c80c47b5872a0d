package comfyjobs

import (
	"encoding/json"
	"time"

	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/storage"
)

// jobJSON is the contract's Job. Logs is the run log: set only by GET
// /api/v2/jobs/{id} on a serverless deployment, and absent (the key
// itself) everywhere else.
type jobJSON struct {
	ID            string          `json:"id"`
	Status        string          `json:"status"`
	CreatedAt     string          `json:"created_at"`
	StartedAt     *string         `json:"started_at"`
	CompletedAt   *string         `json:"completed_at"`
	ExpiresAt     string          `json:"expires_at"`
	QueuePosition *int            `json:"queue_position"`
	Progress      json.RawMessage `json:"progress"`
	Outputs       []outputJSON    `json:"outputs"`
	Error         json.RawMessage `json:"error"`
	Metrics       metricsJSON     `json:"metrics"`
	// Cost is present only for a job of a priced pool (credits enabled);
	// absent, not null, otherwise.
	Cost *costJSON `json:"cost,omitempty"`
	URLs urlsJSON  `json:"urls"`
	Logs *logsJSON `json:"logs,omitempty"`
}

// costJSON is what a priced job reserved and, once it ended, was charged
// (null until then).
type costJSON struct {
	Credits  *int64 `json:"credits"`
	Reserved int64  `json:"reserved"`
}

// logsJSON is the run log: what the run printed, capped (truncated says
// part was left out), and when it was captured.
type logsJSON struct {
	Text       string `json:"text"`
	Truncated  bool   `json:"truncated"`
	CapturedAt string `json:"captured_at"`
}

// logView renders a run log; nil stays nil, so the key is left out.
func logView(l *storage.JobLog) *logsJSON {
	if l == nil {
		return nil
	}
	return &logsJSON{Text: l.Text, Truncated: l.Truncated, CapturedAt: httpx.Time(l.CapturedAt)}
}

type metricsJSON struct {
	QueueMS     *int64 `json:"queue_ms"`
	ExecutionMS *int64 `json:"execution_ms"`
}

type urlsJSON struct {
	Self   string `json:"self"`
	Events string `json:"events"`
	Cancel string `json:"cancel"`
}

// outputJSON is the contract's Output.
type outputJSON struct {
	NodeID       string  `json:"node_id"`
	Name         string  `json:"name"`
	Type         string  `json:"type"`
	ContentType  string  `json:"content_type"`
	SizeBytes    int64   `json:"size_bytes"`
	ID           string  `json:"id"`
	Hash         *string `json:"hash"`
	URL          string  `json:"url"`
	URLExpiresAt string  `json:"url_expires_at"`
	JobID        string  `json:"job_id"`
}

var jsonNull = json.RawMessage("null")

// jobView renders j; queuePos is nil unless the job is queued.
func jobView(j storage.Job, queuePos *int, links httpx.Links, now time.Time) jobJSON {
	self := links.URL("/jobs/" + j.ID)
	v := jobJSON{
		ID:            j.ID,
		Status:        j.Status,
		CreatedAt:     httpx.Time(j.CreatedAt),
		StartedAt:     httpx.TimePtr(j.StartedAt),
		CompletedAt:   httpx.TimePtr(j.CompletedAt),
		ExpiresAt:     httpx.Time(j.ExpiresAt),
		QueuePosition: queuePos,
		Progress:      orNull(j.Progress),
		Outputs:       make([]outputJSON, 0, len(j.Outputs)),
		Error:         orNull(j.Error),
		Metrics:       metricsView(j, now),
		URLs:          urlsJSON{Self: self, Events: self + "/events", Cancel: self + "/cancel"},
	}
	if c := j.Credits; c != nil {
		v.Cost = &costJSON{Credits: c.Charged, Reserved: c.Reserved}
	}
	for _, o := range j.Outputs {
		v.Outputs = append(v.Outputs, outputView(o, j.ID, links, now))
	}
	return v
}

func outputView(o storage.Output, jobID string, links httpx.Links, now time.Time) outputJSON {
	v := outputJSON{
		NodeID:      o.NodeID,
		Name:        o.Name,
		Type:        o.Type,
		ContentType: o.Asset.ContentType,
		SizeBytes:   o.Asset.SizeBytes,
		ID:          o.Asset.ID,
		JobID:       jobID,
	}
	url, expires := links.Content(o.Asset.ID, o.Asset.Object(), o.Asset.ContentType, now)
	v.URL, v.URLExpiresAt = url, httpx.Time(expires)
	if o.Asset.Hash != "" {
		h := o.Asset.Hash
		v.Hash = &h
	}
	return v
}

// metrics derives queue and execution time; each is null until known.
func metricsView(j storage.Job, now time.Time) metricsJSON {
	var m metricsJSON
	if j.StartedAt != nil {
		q := j.StartedAt.Sub(j.CreatedAt).Milliseconds()
		m.QueueMS = &q
		if j.CompletedAt != nil {
			e := j.CompletedAt.Sub(*j.StartedAt).Milliseconds()
			m.ExecutionMS = &e
		}
	}
	return m
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return jsonNull
	}
	return raw
}
