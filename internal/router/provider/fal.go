package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/comfygate/comfygate/internal/router/catalog"
)

// falHosts are the host suffixes fal's queue URLs may point to besides the
// model's own upstream host.
var falHosts = []string{".fal.run", ".fal.ai"}

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
	for _, u := range []string{r.StatusURL, r.ResponseURL, r.CancelURL} {
		if u == "" {
			continue
		}
		if err := handleURLAllowed(m, u, falHosts); err != nil {
			return nil, providerError("the provider's queue answered a handle outside its own hosts"), nil
		}
	}
	return &Handle{Kind: "fal", RequestID: r.RequestID, StatusURL: r.StatusURL, ResponseURL: r.ResponseURL, CancelURL: r.CancelURL}, nil, nil
}

// Poll reads the status; once COMPLETED it fetches and classifies the result.
func (f *Fal) Poll(ctx context.Context, m *catalog.Model, h *Handle) (*Outcome, error) {
	if handleURLAllowed(m, h.StatusURL, falHosts) != nil || handleURLAllowed(m, h.ResponseURL, falHosts) != nil {
		return providerError("the generation's handle points outside the provider's hosts"), nil
	}
	ctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
	defer cancel()
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

// Cancel asks fal to stop the generation. A nil error means the generation
// will reach a final state the caller can poll for: fal took the cancel
// (202 CANCELLATION_REQUESTED: the result then answers as cancelled, unless
// the work finished first) or the generation had already completed (400
// ALREADY_COMPLETED: its result is there, and billed). Either way the
// caller must poll to learn whether it is billable; Cancel decides nothing
// about the charge.
func (f *Fal) Cancel(ctx context.Context, m *catalog.Model, h *Handle) error {
	if h.CancelURL == "" {
		return ErrNoCancel
	}
	if err := handleURLAllowed(m, h.CancelURL, falHosts); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
	defer cancel()
	a, err := f.c.Do(ctx, m, http.MethodPut, h.CancelURL, nil, nil)
	if err != nil {
		return err
	}
	var st struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(a.Body, &st)
	switch {
	case a.Status == http.StatusAccepted || a.Status == http.StatusOK:
		return nil
	case a.Status == http.StatusBadRequest && st.Status == "ALREADY_COMPLETED":
		return nil
	}
	return fmt.Errorf("provider: fal cancel refused: %d %s", a.Status, st.Status)
}
