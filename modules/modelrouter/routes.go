package modelrouter

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/principal"
	"github.com/comfygate/comfygate/internal/router/calls"
	"github.com/comfygate/comfygate/internal/router/catalog"
	"github.com/comfygate/comfygate/internal/router/schema"
	"github.com/comfygate/comfygate/modules/errorenvelope"
)

// maxSuggestions is how many ids a model_not_found detail names.
const maxSuggestions = 3

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyLen = 255

func invalidInput(msg string) *apierr.Error {
	return apierr.New(http.StatusBadRequest, calls.BucketInvalidInput, msg)
}

func methodNotAllowed(allow string) *apierr.Error {
	e := apierr.New(http.StatusMethodNotAllowed, calls.BucketInvalidInput, "method not allowed on this route")
	e.Header = http.Header{"Allow": []string{allow}}
	return e
}

func modelNotFound(suggestions []string) *apierr.Error {
	msg := "no runnable model has this id"
	if len(suggestions) > 0 {
		msg += "; did you mean: " + strings.Join(suggestions, ", ")
	}
	return apierr.New(http.StatusNotFound, "model_not_found", msg)
}

func forbidden() *apierr.Error {
	return apierr.New(http.StatusForbidden, "forbidden", "you are not entitled to use this model")
}

// caller returns the principal comfy_auth set, and what it may see.
func (h *Handler) caller(r *http.Request) (principal.Principal, catalog.Audience, error) {
	p, ok := principal.From(r.Context())
	if !ok || p.WorkspaceID == "" {
		return p, catalog.Audience{}, apierr.Unauthorized()
	}
	return p, catalog.NewAudience(p.Entitlements), nil
}

// model resolves an id from the path for this caller: unknown ids (and
// malformed ones) are model_not_found with suggestions from the entitled
// catalog; known but not entitled is forbidden.
func (h *Handler) model(id string, aud catalog.Audience) (*catalog.Model, error) {
	if _, _, err := catalog.ValidateID(id); err == nil {
		if m, ok := h.cat.Lookup(id); ok {
			if !aud.Sees(m) {
				return nil, forbidden()
			}
			return m, nil
		}
	}
	return nil, modelNotFound(h.cat.Suggest(id, aud, maxSuggestions))
}

// callable is model for a call: the same answers, without building the
// caller's Audience unless an unknown id needs suggestions.
func (h *Handler) callable(id string, entitlements []string) (*catalog.Model, error) {
	if _, _, err := catalog.ValidateID(id); err == nil {
		if m, ok := h.cat.Lookup(id); ok {
			if !catalog.Allows(entitlements, m) {
				return nil, forbidden()
			}
			return m, nil
		}
	}
	return h.model(id, catalog.NewAudience(entitlements))
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("model_router: encode: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, err = w.Write(b)
	return err
}

type listResponse struct {
	Data       []catalog.ListEntry `json:"data"`
	HasMore    bool                `json:"has_more"`
	NextCursor string              `json:"next_cursor,omitempty"`
	Limit      int                 `json:"limit"`
}

func (h *Handler) serveList(w http.ResponseWriter, r *http.Request) error {
	_, aud, err := h.caller(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		var ne *strconv.NumError
		switch {
		case err == nil:
			limit = n
		case errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange):
			limit = catalog.MaxLimit
			if strings.HasPrefix(v, "-") {
				limit = 0
			}
		default:
			return invalidInput("limit must be an integer")
		}
	}
	cursor, hasCursor := q.Get("cursor"), q.Has("cursor")
	if hasCursor && cursor == "" {
		return invalidInput("cursor must not be empty; omit it on the first page")
	}
	page, err := h.cat.Page(aud, cursor, limit)
	if err != nil {
		return invalidInput("the cursor is malformed or expired; start again from the first page").WithCause(err)
	}
	out := listResponse{Data: make([]catalog.ListEntry, 0, len(page.Models)), HasMore: page.HasMore,
		NextCursor: page.NextCursor, Limit: page.Limit}
	for _, m := range page.Models {
		out.Data = append(out.Data, m.Entry())
	}
	return writeJSON(w, http.StatusOK, out)
}

type detailResponse struct {
	catalog.ListEntry
	InputSchemaURL string `json:"input_schema_url,omitempty"`
}

// callerModel resolves the model named in the path for the authenticated
// caller (see model).
func (h *Handler) callerModel(r *http.Request, id string) (*catalog.Model, error) {
	_, aud, err := h.caller(r)
	if err != nil {
		return nil, err
	}
	return h.model(id, aud)
}

func (h *Handler) serveDetail(w http.ResponseWriter, r *http.Request, id string) error {
	m, err := h.callerModel(r, id)
	if err != nil {
		return err
	}
	out := detailResponse{ListEntry: m.Entry()}
	if m.SchemaBytes != nil {
		out.InputSchemaURL = h.schemaURL(r, m)
	}
	return writeJSON(w, http.StatusOK, out)
}

// schemaURL is the absolute https:// address of the model's schema
// document, under the route prefix the request came in on.
func (h *Handler) schemaURL(r *http.Request, m *catalog.Model) string {
	base := "https://" + r.Host
	if h.baseURL != nil {
		base = h.baseURL.String()
	}
	prefix, _, _ := cutRoutePrefix(r.URL.Path)
	return base + prefix + "/" + m.ID + "/openapi.json"
}

const schemaCacheControl = "private, must-revalidate"

func (h *Handler) serveSchema(w http.ResponseWriter, r *http.Request, id string) error {
	m, err := h.callerModel(r, id)
	if err != nil {
		return err
	}
	if m.SchemaBytes == nil {
		return apierr.New(http.StatusNotFound, "model_not_found", "no input schema has been authored for this model")
	}
	hdr := w.Header()
	hdr.Set("ETag", m.ETag)
	hdr.Set("Cache-Control", schemaCacheControl)
	if etagMatches(r.Header.Values("If-None-Match"), m.ETag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Content-Length", strconv.Itoa(len(m.SchemaBytes)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	_, err = w.Write(m.SchemaBytes)
	return err
}

// etagMatches applies If-None-Match with RFC 9110 weak comparison: W/
// prefixes are ignored and * matches any current representation.
func etagMatches(values []string, etag string) bool {
	want := strings.TrimPrefix(etag, "W/")
	for _, v := range values {
		for _, tag := range strings.Split(v, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" || strings.TrimPrefix(tag, "W/") == want {
				return true
			}
		}
	}
	return false
}

// validKey checks an Idempotency-Key: 1–255 printable ASCII characters
// (spaces included: HTTP keeps those inside a header value).
func validKey(k string) bool {
	if k == "" || len(k) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func (h *Handler) serveCall(w http.ResponseWriter, r *http.Request, id string) (err error) {
	// Every call is counted by provider (only once the model is one of the
	// catalog's: ids from the URL are unbounded) and by how it ended.
	start, provider, bucket := time.Now(), "none", "ok"
	defer func() {
		if e, ok := apierr.As(err); ok {
			bucket = e.Code
		} else if err != nil {
			bucket = calls.BucketInternal
		}
		metrics.RouterCalls.WithLabelValues(provider, bucket).Inc()
		metrics.RouterCallDuration.WithLabelValues(provider).Observe(time.Since(start).Seconds())
	}()
	p, ok := principal.From(r.Context())
	if !ok || p.WorkspaceID == "" {
		return apierr.Unauthorized()
	}
	m, err := h.callable(id, p.Entitlements)
	if err != nil {
		return err
	}
	provider = m.Provider
	keys := r.Header.Values("Idempotency-Key")
	key, hasKey := "", len(keys) > 0
	if len(keys) > 1 {
		// Which one a retry would repeat cannot be told (the v2 routes refuse it too).
		return invalidInput("send one Idempotency-Key header")
	}
	if hasKey {
		key = keys[0]
		if !validKey(key) {
			return invalidInput("Idempotency-Key must be 1 to 255 printable ASCII characters")
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return invalidInput(fmt.Sprintf("the request body exceeds %d bytes", h.MaxBodyBytes))
		}
		return calls.ClientClosed().WithCause(err)
	}
	if m.Validator != nil {
		details, err := m.Validator.ValidateJSON(body)
		if err != nil {
			return invalidInput("the request body is not valid JSON").WithCause(err)
		}
		if len(details) > 0 {
			return apierr.New(http.StatusUnprocessableEntity, calls.BucketInvalidInput, "the input does not match the model's schema").
				WithDetails(map[string]any{"detail": details})
		}
	} else if _, err := schema.DecodeBody(body); err != nil {
		return invalidInput("the request body is not valid JSON").WithCause(err)
	}
	req := calls.Request{
		RequestID: requestID(w, r), Workspace: p.WorkspaceID, Model: m, Body: body, Header: r.Header,
		IdempotencyKey: key, ContentBase: h.contentBase(r),
	}
	if hasKey {
		req.Fingerprint = fingerprint(r, body)
	}
	resp, err := h.service.Call(r.Context(), req)
	if err != nil {
		return err
	}
	if resp.Bucket != "" {
		bucket = resp.Bucket
	}
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		metrics.RouterReplays.Inc()
	}
	hdr := w.Header()
	for k, vs := range resp.Header {
		hdr[k] = vs
	}
	if resp.Bucket != "" {
		errorenvelope.SetRouterErrorType(hdr, resp.Bucket)
	}
	if resp.ContentType != "" {
		hdr.Set("Content-Type", resp.ContentType)
	}
	// The partner's bytes under the partner's type: a browser must not
	// sniff them into something else.
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, err = w.Write(resp.Body)
	return err
}

// requestID is the id error_envelope put on the response (the request's
// {http.request.uuid}).
func requestID(w http.ResponseWriter, r *http.Request) string {
	if id := w.Header().Get("X-Service-Request-Id"); id != "" {
		return id
	}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		return repl.ReplaceAll("{http.request.uuid}", "")
	}
	return ""
}

// fingerprint binds an Idempotency-Key to method, path and query, and body.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.RequestURI()))
	h.Write([]byte{0})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// contentBase is the base URL of the asset API for copied results:
// rehost_base, else the call's own origin + /api/v2.
func (h *Handler) contentBase(r *http.Request) string {
	if h.rehostBase != "" {
		return h.rehostBase
	}
	return httpx.Origin(r) + "/api/v2"
}
