// Package comfyassets is the comfy_assets handler: the /api/v2/assets
// routes. It parses requests, calls the assets service and renders its
// results; errors go back to error_envelope.
package comfyassets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/internal/deployments"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/principal"
	"github.com/comfygate/comfygate/modules/comfyauth"
	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// multipartSlack is the room allowed for multipart framing around a file of
// the maximum size.
const multipartSlack = 1 << 20

// maxJSONBody bounds the small JSON bodies of this API.
const maxJSONBody = 64 << 10

// Handler serves /api/v2/assets.
type Handler struct {
	app    *comfygate.App
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.comfy_assets",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision reaches the app.
func (h *Handler) Provision(ctx caddy.Context) error {
	// It reads the principal: refuse a config with no comfy_auth before it.
	if err := comfyauth.RequireBefore(ctx, "comfy_assets"); err != nil {
		return err
	}
	app, err := ctx.App("comfygate")
	if err != nil {
		return fmt.Errorf("comfy_assets: %w", err)
	}
	h.app = app.(*comfygate.App)
	h.logger = ctx.Logger()
	return nil
}

// ServeHTTP routes an assets request. Paths outside /api/v2/assets pass to next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	_, rest, ok := httpx.Route(r.URL.Path)
	if !ok || (rest != "assets" && !strings.HasPrefix(rest, "assets/")) {
		return next.ServeHTTP(w, r)
	}
	p, ok := principal.From(r.Context())
	if !ok {
		return apierr.Upstream(errors.New("comfy_assets: no principal; put comfy_auth before comfy_assets"))
	}
	if err := h.app.Ready(); err != nil {
		return apierr.Upstream(err)
	}
	svc := h.app.Assets()
	if scope, scoped := deployments.From(r.Context()); scoped {
		if !scope.Admitted() {
			return apierr.Upstream(errors.New("comfy_assets: deployment not admitted; put comfy_auth after comfy_deployment"))
		}
		svc.Deployment = scope.ID
		if scope.Public() && scope.Demo.MaxUploadBytes > 0 {
			svc.MaxUploadBytes = min(svc.MaxUploadBytes, scope.Demo.MaxUploadBytes)
		}
	}
	parts := strings.Split(rest, "/")
	if len(parts) > 1 {
		parts[1] = httpx.CanonicalID(parts[1])
	}
	switch {
	case len(parts) == 1:
		if r.Method != http.MethodPost {
			return httpx.MethodNotAllowed(http.MethodPost)
		}
		return h.upload(w, r, svc, p)
	case len(parts) == 2 && parts[1] == "from-hash":
		if r.Method != http.MethodPost {
			return httpx.MethodNotAllowed(http.MethodPost)
		}
		return h.fromHash(w, r, svc, p)
	case len(parts) == 3 && parts[1] == "by-hash":
		if r.Method != http.MethodHead && r.Method != http.MethodGet {
			return httpx.MethodNotAllowed(http.MethodGet, http.MethodHead)
		}
		return h.byHash(w, r, svc, p, parts[2])
	case len(parts) == 2:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			a, err := svc.Get(r.Context(), p.AccountID, parts[1])
			if err != nil {
				return err
			}
			return httpx.WriteJSON(w, http.StatusOK, View(a, h.links(r), nil, time.Now()))
		case http.MethodDelete:
			if err := svc.Delete(r.Context(), p.AccountID, parts[1]); err != nil {
				return err
			}
			w.WriteHeader(http.StatusNoContent)
			return nil
		default:
			return httpx.MethodNotAllowed(http.MethodGet, http.MethodHead, http.MethodDelete)
		}
	case len(parts) == 3 && parts[2] == "content":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return httpx.MethodNotAllowed(http.MethodGet, http.MethodHead)
		}
		return h.content(w, r, svc, p, parts[1])
	}
	return apierr.NotFound("no such route")
}

// links builds the response's URLs; content URLs are presigned when the
// blob store presigns.
func (h *Handler) links(r *http.Request) httpx.Links {
	return httpx.LinksFor(r).WithSigner(h.app.Presigner())
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request, svc *assets.Service, p principal.Principal) (err error) {
	start := time.Now()
	defer func() {
		if e, ok := apierr.As(err); ok {
			metrics.UploadRefusals.WithLabelValues(e.Code).Inc()
		} else if err != nil {
			metrics.UploadRefusals.WithLabelValues("upstream_error").Inc()
		}
	}()
	limit := svc.MaxUploadBytes + multipartSlack
	if r.ContentLength > limit {
		return apierr.PayloadTooLarge(svc.MaxUploadBytes)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	res, err := svc.Upload(r.Context(), p.AccountID, r.Body, r.Header.Get("Content-Type"))
	if err != nil {
		return clientReadError(r.Context(), err)
	}
	status, outcome := http.StatusCreated, "stored"
	if !res.CreatedNew {
		status, outcome = http.StatusOK, "deduplicated"
	}
	metrics.Uploads.WithLabelValues(outcome).Inc()
	metrics.UploadBytes.Add(float64(res.Asset.SizeBytes))
	metrics.UploadDuration.Observe(time.Since(start).Seconds())
	return httpx.WriteJSON(w, status, View(res.Asset, h.links(r), &res.CreatedNew, time.Now()))
}

// clientReadError turns a body that stopped early (a disconnect, a cut
// connection) into a client error so it is not logged as ours.
func clientReadError(ctx context.Context, err error) error {
	if _, ok := apierr.As(err); ok {
		return err
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	if ctx.Err() != nil || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return apierr.InvalidRequest("the request body ended before the upload was complete").WithCause(err)
	}
	return err
}

func (h *Handler) fromHash(w http.ResponseWriter, r *http.Request, svc *assets.Service, p principal.Principal) error {
	var in assets.FromHashRequest
	if err := httpx.DecodeJSON(r, maxJSONBody, &in, true); err != nil {
		return err
	}
	res, err := svc.FromHash(r.Context(), p.AccountID, in)
	if err != nil {
		return err
	}
	status := http.StatusOK
	var createdNew *bool
	if res.New {
		status = http.StatusCreated
		createdNew = &res.CreatedNew
	}
	return httpx.WriteJSON(w, status, View(res.Asset, h.links(r), createdNew, time.Now()))
}

func (h *Handler) byHash(w http.ResponseWriter, r *http.Request, svc *assets.Service, p principal.Principal, hash string) error {
	ok, err := svc.HasBlob(r.Context(), p.AccountID, hash)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusNotFound)
			return nil
		}
		return apierr.BlobNotFound()
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *Handler) content(w http.ResponseWriter, r *http.Request, svc *assets.Service, p principal.Principal, id string) error {
	a, err := svc.Get(r.Context(), p.AccountID, id)
	if err != nil {
		return err
	}
	if signer := h.app.Presigner(); signer != nil {
		url, _, err := signer.PresignGet(a.Object(), a.ContentType)
		if err != nil {
			return apierr.Upstream(err)
		}
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, url, http.StatusFound)
		return nil
	}
	var body io.ReadSeeker
	if r.Method == http.MethodHead {
		// Nothing is read; the store is still asked that the bytes are there.
		if err := svc.StatContent(r.Context(), a); err != nil {
			return err
		}
		body = sizeOnly(a.SizeBytes)
	} else {
		f, err := svc.OpenContent(r.Context(), a, httpx.RangeStart(r.Header.Get("Range"), a.SizeBytes))
		if err != nil {
			return err
		}
		defer f.Close()
		body = &readFailure{r: f}
	}
	hdr := w.Header()
	hdr.Set("Content-Type", a.ContentType)
	hdr.Set("ETag", `"`+strings.TrimPrefix(a.Hash, "blake3:")+`"`)
	hdr.Set("Cache-Control", "private, max-age=3600, immutable")
	httpx.UntrustedContent(hdr)
	// ServeContent answers Range (206/416), If-None-Match and HEAD.
	refused := httpx.ServeContent(w, r, a.CreatedAt, body)
	if rf, ok := body.(*readFailure); ok && rf.err != nil {
		// The status line is out: the one honest thing left is to cut the
		// connection, so that the client sees a failed transfer, not a
		// short 200.
		h.logger.Error("reading an asset's bytes failed mid-response",
			zap.String("asset_id", a.ID), zap.Error(rf.err))
		panic(http.ErrAbortHandler)
	}
	return refused
}

// readFailure remembers the error that ended a read (ServeContent drops it).
type readFailure struct {
	r   io.ReadSeeker
	err error
}

func (f *readFailure) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil && err != io.EOF && f.err == nil {
		f.err = err
	}
	return n, err
}

func (f *readFailure) Seek(off int64, whence int) (int64, error) { return f.r.Seek(off, whence) }

// sizeOnly is a ReadSeeker with a size and no bytes, for HEAD.
type sizeOnly int64

func (s sizeOnly) Read([]byte) (int, error) {
	return 0, errors.New("comfy_assets: HEAD reads no bytes")
}

func (s sizeOnly) Seek(off int64, whence int) (int64, error) {
	if whence == io.SeekEnd {
		return int64(s) + off, nil
	}
	return off, nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
