package provider

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/comfygate/comfygate/internal/router/catalog"
)

// bflHosts are the host suffixes a BFL polling_url may point to besides
// the model's own upstream host (BFL answers regional api.*.bfl.ai hosts).
var bflHosts = []string{".bfl.ai"}

// BFL is Black Forest Labs: submit, then poll the polling_url it returns.
// BFL reports outcomes in the poll body with HTTP 200; it has no cancel.
type BFL struct{ c *Client }

// Submit posts the generation and returns its handle.
func (b *BFL) Submit(ctx context.Context, m *catalog.Model, body []byte, in http.Header) (*Handle, *Outcome, error) {
	a, err := b.c.Do(ctx, m, http.MethodPost, m.Upstream, body, in)
	if err != nil {
		return nil, nil, err
	}
	if a.Status != http.StatusOK {
		return nil, Classify(m, a), nil
	}
	var r struct {
		ID         string `json:"id"`
		PollingURL string `json:"polling_url"`
	}
	if err := json.Unmarshal(a.Body, &r); err != nil || r.ID == "" || r.PollingURL == "" {
		return nil, providerError("the provider answered without a polling handle"), nil
	}
	if err := handleURLAllowed(m, r.PollingURL, bflHosts); err != nil {
		return nil, providerError("the provider answered a polling handle outside its own hosts"), nil
	}
	return &Handle{Kind: "bfl", RequestID: r.ID, PollingURL: r.PollingURL}, nil, nil
}

// Poll reads the task's state. Ready passes the poll body through as the
// native output; Ready without result.sample is a silent refusal.
func (b *BFL) Poll(ctx context.Context, m *catalog.Model, h *Handle) (*Outcome, error) {
	if err := handleURLAllowed(m, h.PollingURL, bflHosts); err != nil {
		return providerError("the generation's polling handle points outside the provider's hosts"), nil
	}
	ctx, cancel := context.WithTimeout(ctx, exchangeTimeout)
	defer cancel()
	a, err := b.c.Do(ctx, m, http.MethodGet, h.PollingURL, nil, nil)
	if err != nil {
		return nil, err
	}
	if a.Status != http.StatusOK {
		return Classify(m, a), nil
	}
	var st struct {
		Status string `json:"status"`
		Result *struct {
			Sample *probe `json:"sample"`
		} `json:"result"`
	}
	if err := json.Unmarshal(a.Body, &st); err != nil {
		return providerError("the provider answered an unreadable task state"), nil
	}
	switch st.Status {
	case "Pending", "Queued", "Processing":
		return nil, nil
	case "Request Moderated", "Content Moderated":
		return contentPolicy(m), nil
	case "Ready":
		if st.Result == nil || st.Result.Sample == nil || st.Result.Sample.empty {
			return contentPolicy(m), nil
		}
		return &Outcome{Status: http.StatusOK, ContentType: "application/json", Body: a.Body, Billable: true}, nil
	case "Task not found":
		return providerError("the provider lost the generation"), nil
	}
	return providerError("the provider reported a failed generation"), nil
}

// Cancel is not offered by BFL.
func (b *BFL) Cancel(context.Context, *catalog.Model, *Handle) error { return ErrNoCancel }
