package provider

import (
	"context"
	"net/http"

	"github.com/comfygate/comfygate/internal/router/catalog"
)

// HTTP is the synchronous passthrough adapter: one POST to the upstream, the
// answer classified and passed through. It holds no handle, so a call that
// outlives the router's deadline has nothing to collect.
type HTTP struct{ c *Client }

// Submit posts body to the model's upstream and classifies the answer.
func (h *HTTP) Submit(ctx context.Context, m *catalog.Model, body []byte, in http.Header) (*Handle, *Outcome, error) {
	a, err := h.c.Do(ctx, m, http.MethodPost, m.Upstream, body, in)
	if err != nil {
		return nil, nil, err
	}
	return nil, Classify(m, a), nil
}

// Poll is never called: HTTP has no handles.
func (h *HTTP) Poll(context.Context, *catalog.Model, *Handle) (*Outcome, error) {
	return providerError("no generation to poll"), nil
}

// Cancel is not supported.
func (h *HTTP) Cancel(context.Context, *catalog.Model, *Handle) error { return ErrNoCancel }
