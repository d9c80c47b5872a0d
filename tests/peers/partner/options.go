package partner

import "time"

// Detail is one entry of a FastAPI-style 422 body, {"detail":[Detail…]}. fal,
// BFL and ElevenLabs all use this form, and the router passes it through
// unchanged. URL is fal's link to its error documentation.
type Detail struct {
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Type  string         `json:"type"`
	Ctx   map[string]any `json:"ctx,omitempty"`
	Input any            `json:"input,omitempty"`
	URL   string         `json:"url,omitempty"`
}

// DefaultValidationDetail is what WithValidationError(nil) answers: an
// out-of-range field carrying a ctx and the rejected input, so that tests can
// check that every field is passed through.
var DefaultValidationDetail = []Detail{{
	Loc:   []any{"body", "num_images"},
	Msg:   "Input should be less than or equal to 4",
	Type:  "less_than_equal",
	Ctx:   map[string]any{"le": 4},
	Input: 9,
	URL:   "https://docs.fal.ai/errors#less_than_equal",
}}

// Option is a switch on a peer. Options compose and apply in order. Pass them
// to a constructor or to [Peer.SetOptions].
type Option func(*config)

// config holds the switches. Per-call switches are copied into each queued
// job when it is submitted.
type config struct {
	authHeader string
	authValue  string

	hang   bool
	status int

	latency       time.Duration
	neverComplete bool
	validation    []Detail
	refusal       bool
	outputRefusal bool
	resultStatus  int
	garbage       bool
	empty         bool

	mediaExpiry time.Duration
	mediaSize   int
	mediaURL    string
	mediaData   []byte
	base64      bool
}

// WithLatency sets how long the work takes. For sync peers it delays the
// response. For fal it is the time spent IN_PROGRESS after submission, and for
// BFL the time spent Pending. A waiting sync response stops early when the
// client goes away or the peer closes.
func WithLatency(d time.Duration) Option { return func(c *config) { c.latency = d } }

// WithValidationError makes the model reject the input with 422
// {"detail":[…]}. A nil detail means DefaultValidationDetail. Sync peers answer
// it directly, fal answers it on response_url, and BFL answers it on submit.
func WithValidationError(detail []Detail) Option {
	return func(c *config) {
		if detail == nil {
			detail = DefaultValidationDetail
		}
		c.validation = detail
	}
}

// WithRefusal makes the model refuse the input on content-policy grounds, in
// the partner's own form (see the package table).
func WithRefusal() Option { return func(c *config) { c.refusal = true } }

// WithOutputRefusal makes the model refuse its own output after the work is
// done. On BFL this is "Content Moderated"; on other kinds it is the same as
// WithRefusal.
func WithOutputRefusal() Option { return func(c *config) { c.outputRefusal = true } }

// WithEmptyMedia makes the call "succeed" with no media: {"images":[]}, zero
// audio bytes, or a BFL Ready without result.sample. This mimics silent
// refusals.
func WithEmptyMedia() Option { return func(c *config) { c.empty = true } }

// WithMediaExpiry makes the media URLs in answers expire d after they are
// minted (403, as an expired signed delivery URL), like BFL's.
func WithMediaExpiry(d time.Duration) Option { return func(c *config) { c.mediaExpiry = d } }

// WithMediaSize makes the media n bytes long (a PNG followed by filler
// derived from the job id; see MediaBytes).
func WithMediaSize(n int) Option { return func(c *config) { c.mediaSize = n } }

// WithMediaURL makes answers point at u instead of the peer's own media:
// an address the router must not fetch, one that is too large or too slow.
func WithMediaURL(u string) Option { return func(c *config) { c.mediaURL = u } }

// WithBase64Data makes the JSON and fal peers answer their images as
// base64 of data (a decompression bomb, say) instead of MediaBytes.
func WithBase64Data(data []byte) Option {
	return func(c *config) { c.base64, c.mediaData = true, data }
}

// WithBase64Media makes the JSON and fal peers answer their images as
// base64 payloads (OpenAI Images' "b64_json") instead of URLs.
func WithBase64Media() Option { return func(c *config) { c.base64 = true } }

// WithStatus makes every API request, after auth, answer with code and the
// partner's error body for that status. No submission is counted. Use 0 to
// turn it off.
func WithStatus(code int) Option { return func(c *config) { c.status = code } }

// WithResultStatus lets the submission succeed and then fails the job with
// code. fal answers code with its flat request-error body on response_url
// (504 gives request_timeout). BFL reports status "Error" on the poll. Sync
// peers treat it as WithStatus.
func WithResultStatus(code int) Option { return func(c *config) { c.resultStatus = code } }

// WithGarbage makes the final answer uninterpretable: 200 with truncated JSON,
// or for sync bytes a body cut short by a dropped connection.
func WithGarbage() Option { return func(c *config) { c.garbage = true } }

// WithHang makes every API request wait without answering until the client
// goes away or the peer closes. The connection is then dropped.
func WithHang() Option { return func(c *config) { c.hang = true } }

// WithNeverComplete keeps queued jobs IN_PROGRESS or Pending until
// [Peer.CompleteAll] or Close. The HTTP requests themselves answer normally.
func WithNeverComplete() Option { return func(c *config) { c.neverComplete = true } }

// WithAuth sets the credential the peer requires: the header name and its
// exact value, such as ("Authorization", "Key s3cret"). An empty header turns
// the check off.
func WithAuth(header, value string) Option {
	return func(c *config) { c.authHeader, c.authValue = header, value }
}

// WithNoFaults clears every switch except auth: no latency, no failures. Use
// it with SetOptions to make a peer healthy again.
func WithNoFaults() Option {
	return func(c *config) {
		*c = config{authHeader: c.authHeader, authValue: c.authValue}
	}
}
