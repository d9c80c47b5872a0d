// Package httpx holds the small HTTP pieces the v2 handlers share: where the
// API is mounted, absolute links, JSON bodies and timestamps.
package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage/blob"
)

// APIRoot is the path segment every v2 route carries.
const APIRoot = "/api/v2/"

// Route splits a request path into the mount prefix (what precedes /api/v2,
// for example /deployment/{id}) and the route below /api/v2/. ok is false
// when the path is not under /api/v2.
func Route(path string) (prefix, rest string, ok bool) {
	i := strings.Index(path, APIRoot)
	if i < 0 {
		return "", "", false
	}
	return path[:i], path[i+len(APIRoot):], true
}

// Origin is scheme://host of the request.
func Origin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// Links builds absolute URLs for resources under the request's mount.
type Links struct {
	base   string
	signer ContentSigner
}

// ContentSigner presigns URLs at which the blob store itself serves a
// blob (blob.Presigner).
type ContentSigner interface {
	PresignGet(obj blob.Ref, contentType string) (url string, expires time.Time, err error)
}

// WithSigner returns links whose content URLs are presigned by s; a nil s
// keeps them proxy-served.
func (l Links) WithSigner(s ContentSigner) Links {
	l.signer = s
	return l
}

// LinksFor returns the link builder for r: links keep the prefix the API
// is mounted under, including one a handler stripped (see WithMount).
func LinksFor(r *http.Request) Links {
	prefix, _, _ := Route(r.URL.Path)
	if m, ok := r.Context().Value(mountKey{}).(string); ok {
		prefix = m + prefix
	}
	return Links{base: Origin(r) + prefix + strings.TrimSuffix(APIRoot, "/")}
}

type mountKey struct{}

// WithMount records that a handler stripped mount from the request's path
// (comfy_deployment's /deployment/{id}), so that links still carry it.
func WithMount(ctx context.Context, mount string) context.Context {
	return context.WithValue(ctx, mountKey{}, mount)
}

// URL returns the absolute URL of the v2 path p (which starts with /).
func (l Links) URL(p string) string { return l.base + p }

// ContentURLLifetime is how long an asset's content URL is announced as
// valid. The URL itself is authenticated per request, so this is a promise
// of freshness rather than a signature's expiry.
const ContentURLLifetime = time.Hour

// AssetContent returns the URL of an asset's bytes.
func (l Links) AssetContent(assetID string) string { return l.URL("/assets/" + assetID + "/content") }

// Content returns the url and url_expires_at of an asset's bytes (obj, the
// object its blob row names): a presigned URL of the blob store and its
// expiry when the links carry a signer, else the gateway's content route,
// announced for ContentURLLifetime. Should presigning fail, the content
// route is given: it answers with a fresh presigned URL, or the error,
// itself.
func (l Links) Content(assetID string, obj blob.Ref, contentType string, now time.Time) (string, time.Time) {
	if l.signer != nil && obj.Hash != "" {
		if u, expires, err := l.signer.PresignGet(obj, contentType); err == nil {
			return u, expires
		}
	}
	return l.AssetContent(assetID), now.Add(ContentURLLifetime)
}

// WriteJSON writes v with status.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// DecodeJSON reads a bounded JSON object body into v, refusing unknown
// members when strict is set. A body over limit is 413; anything but one
// JSON object (null, an array, trailing data) is 400.
func DecodeJSON(r *http.Request, limit int64, v any, strict bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return ReadFailure(err, limit)
	}
	if int64(len(body)) > limit {
		return apierr.PayloadTooLarge(limit)
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return apierr.InvalidRequest("the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return apierr.InvalidRequest("the body must be a JSON object of the documented shape: " + jsonReason(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return apierr.InvalidRequest("the body must hold exactly one JSON object")
	}
	if strict {
		if name, ok := unknownMember(trimmed, v); !ok {
			return apierr.InvalidRequest(fmt.Sprintf("the body must be a JSON object of the documented shape: unknown member %q", truncate(name, 64)))
		}
	}
	return nil
}

// unknownMember finds a top-level member of body that is not exactly the
// JSON name of one of v's fields. encoding/json matches names without
// regard to case, so DisallowUnknownFields lets {"Hash":…} through as
// "hash" (and a second spelling overwrite the first).
func unknownMember(body []byte, v any) (string, bool) {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return "", true
	}
	names := map[string]bool{}
	for f := range t.Fields() {
		if f.Anonymous {
			return "", true // promoted fields: left to encoding/json
		}
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		return "", true
	}
	for m := range members {
		if !names[m] {
			return m, false
		}
	}
	return "", true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func jsonReason(err error) string {
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// Time formats a timestamp as RFC 3339 in UTC.
func Time(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// TimePtr formats an optional timestamp; nil stays nil (JSON null).
func TimePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := Time(*t)
	return &s
}

// Reads reports a GET or a HEAD: a resource read with GET is read with
// HEAD too (RFC 9110 §9.1), net/http leaving out the body.
func Reads(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

// MethodNotAllowed is the error for a known path with the wrong method.
func MethodNotAllowed(allow ...string) error {
	e := apierr.New(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
	e.Header = http.Header{"Allow": []string{strings.Join(allow, ", ")}}
	return e
}

// CanonicalID is id in lower case when it is a UUID in any case (RFC 9562
// §4: UUIDs compare without regard to case; the stores hold them lower
// case), else id unchanged.
func CanonicalID(id string) string {
	if len(id) != 36 {
		return id
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return id
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		default:
			return id
		}
	}
	return strings.ToLower(id)
}
