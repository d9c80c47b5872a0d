// Package provider holds the model router's partner adapters and the rules
// that turn a partner's answer into the router's contract: a native success
// passed through unchanged, a 422 detail list passed through, or one of the
// provider buckets (content_policy_violation, provider_error,
// provider_timeout).
//
// Adapters are plain HTTP clients rather than a reverse proxy: every answer
// must be read whole to be classified (a 200 without media is a refusal, a
// 200 that is not JSON is a provider_error) and recorded for idempotent
// replay, and the outbound dialer must refuse private addresses at dial
// time, which Caddy's proxy transport cannot be told to do.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/comfygate/comfygate/internal/router/catalog"
)

// Buckets of partner outcomes ("" is success): what classification
// produces, and service_unavailable for an answer the router had no room
// to read (ErrResponseBudget).
const (
	BucketInvalidInput       = "invalid_input"
	BucketContentPolicy      = "content_policy_violation"
	BucketProviderError      = "provider_error"
	BucketProviderTimout     = "provider_timeout"
	BucketServiceUnavailable = "service_unavailable"
)

// Outcome is a partner's final answer in router terms.
type Outcome struct {
	// Bucket is "" for success, else the router bucket.
	Bucket string
	// Status is the HTTP status the router answers.
	Status int
	// ContentType and Body are the answer: the native output on success,
	// {"detail":[…]} for a passed-through 422, and the router's own
	// {detail, error_type} body for the other buckets.
	ContentType string
	Body        []byte
	// Billable reports whether the partner produced (and bills) a
	// generation: true for success; for a content-policy refusal the
	// catalog's charges_on_policy_rejection decides.
	Billable bool
}

// Handle identifies a generation a handle-bearing partner accepted. It is
// stored (as JSON) before the router waits on it, so a retry with the same
// Idempotency-Key can collect it.
type Handle struct {
	Kind        string `json:"kind"`
	RequestID   string `json:"request_id,omitempty"`
	StatusURL   string `json:"status_url,omitempty"`
	ResponseURL string `json:"response_url,omitempty"`
	CancelURL   string `json:"cancel_url,omitempty"`
	PollingURL  string `json:"polling_url,omitempty"`
}

// Adapter talks to one partner protocol.
type Adapter interface {
	// Submit dispatches body. A handle-less adapter returns the final
	// outcome; a handle-bearing one returns the handle, or an outcome when
	// the submission itself was answered with a refusal or failure. An
	// error is a transport failure (ctx expiry included).
	Submit(ctx context.Context, m *catalog.Model, body []byte, in http.Header) (*Handle, *Outcome, error)
	// Poll asks once for the generation's state: nil outcome while it runs.
	Poll(ctx context.Context, m *catalog.Model, h *Handle) (*Outcome, error)
	// Cancel asks the partner to stop the generation (best effort; a
	// partner without cancel returns ErrNoCancel).
	Cancel(ctx context.Context, m *catalog.Model, h *Handle) error
}

// ErrNoCancel is returned by Cancel on partners without a cancel endpoint.
var ErrNoCancel = errors.New("provider: partner has no cancel")

// ErrBlockedAddress is a dial refused because the address is private,
// loopback or otherwise not a public unicast address.
var ErrBlockedAddress = errors.New("provider: destination address not allowed")

// ErrInsecureScheme is an outbound URL that is not https while insecure
// upstreams are not allowed.
var ErrInsecureScheme = errors.New("provider: upstream must use https")

// Adapters returns the adapter for every catalog adapter kind, sharing c.
func Adapters(c *Client) map[catalog.Adapter]Adapter {
	return map[catalog.Adapter]Adapter{
		catalog.AdapterHTTP: &HTTP{c: c},
		catalog.AdapterFal:  &Fal{c: c},
		catalog.AdapterBFL:  &BFL{c: c},
	}
}

// ErrorBody renders the router's {detail, error_type} body.
func ErrorBody(bucket, detail string) []byte {
	b, _ := json.Marshal(struct {
		Detail    string `json:"detail"`
		ErrorType string `json:"error_type"`
	}{detail, bucket})
	return b
}

// Fail builds an error outcome with the router body.
func Fail(bucket string, status int, detail string) *Outcome {
	return &Outcome{Bucket: bucket, Status: status, ContentType: "application/json", Body: ErrorBody(bucket, detail)}
}

// Failure outcomes shared by the adapters.
func providerError(detail string) *Outcome {
	return Fail(BucketProviderError, http.StatusBadGateway, detail)
}

func providerTimeout() *Outcome {
	return Fail(BucketProviderTimout, http.StatusGatewayTimeout, "the provider did not answer within its own deadline")
}

func contentPolicy(m *catalog.Model) *Outcome {
	o := Fail(BucketContentPolicy, http.StatusBadRequest, "the provider refused the request on content-policy grounds")
	o.Billable = m.Billing.ChargesOnPolicyRejection == catalog.ChargesYes
	return o
}
