package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/comfygate/comfygate/modules/router/catalog"
)

// Fal is fal's queue protocol: submit to queue.fal.run, poll status_url,
// fetch response_url, cancel with cancel_url. Only the URLs fal returns are
// used (they drop the submit's subpath).
type Fal struct{ c *Client }

// Submit enqueues the generation and returns its handle.
func (f *Fal) Submit(ctx context.Context, m *catalog.Model, body []byte, in http.Header) (*Handle, *Outcome, error) {
	a, err := f.c.Do(ctx, m, http.MethodPost, m.Upstream, body, in)
	if err != nil {
		return nil, nil, err
	}
	if a.Status != http.StatusOK && a.Status != http.StatusAccepted {
		return nil, Classify(m, a), nil
	}
	var r struct {
		RequestID   string `json:"request_id"`
		ResponseURL string `json:"response_url"`
		StatusURL   string `json:"status_url"`
		CancelURL   string `json:"cancel_url"`
	}
	if err := json.Unmarshal(a.Body, &r); err != nil || r.RequestID == "" || r.StatusURL == "" || r.ResponseURL == "" {
		return nil, providerError("the provider's queue answered without a request handle"), nil
	}
	return &Handle{Kind: "fal", RequestID: r.RequestID, StatusURL: r.StatusURL, ResponseURL: r.ResponseURL, CancelURL: r.CancelURL}, nil, nil
}

// Poll reads the status; once COMPLETED it fetches and classifies the result.
func (f *Fal) Poll(ctx context.Context, m *catalog.Model, h *Handle) (*Outcome, error) {
	a, err := f.c.Do(ctx, m, http.MethodGet, h.StatusURL, nil, nil)
	if err != nil {
		return nil, err
	}
	if a.Status >= 400 {
		return Classify(m, a), nil
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(a.Body, &st); err != nil {
		return providerError("the provider's queue answered an unreadable status"), nil
	}
	switch st.Status {
	case "IN_QUEUE", "IN_PROGRESS":
		return nil, nil
	case "COMPLETED":
	default:
		return providerError("the provider's queue reported an unknown status"), nil
	}
	res, err := f.c.Do(ctx, m, http.MethodGet, h.ResponseURL, nil, nil)
	if err != nil {
		return nil, err
	}
	return Classify(m, res), nil
}

// Cancel asks fal to stop the generation.
func (f *Fal) Cancel(ctx context.Context, m *catalog.Model, h *Handle) error {
	if h.CancelURL == "" {
		return ErrNoCancel
	}
	a, err := f.c.Do(ctx, m, http.MethodPut, h.CancelURL, nil, nil)
	if err != nil {
		return err
	}
	if a.Status >= 300 && a.Status != http.StatusBadRequest { // 400 = ALREADY_COMPLETED
		return errors.New("provider: fal cancel refused")
	}
	return nil
}
