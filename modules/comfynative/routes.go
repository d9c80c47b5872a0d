package comfynative

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"runtime"
	"strconv"
	"strings"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/internal/nativeapi"
	"github.com/comfygate/comfygate/modules/comfygate"
	"github.com/comfygate/comfygate/storage"
)

// maxControlBody bounds the small JSON bodies of /queue, /history and
// /interrupt.
const maxControlBody = 1 << 20

// multipartSlack is the room allowed for multipart framing around a file of
// the maximum upload size.
const multipartSlack = 1 << 20

func writeJSON(w http.ResponseWriter, v any) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return json.NewEncoder(w).Encode(v)
}

func writeRejection(w http.ResponseWriter, r *nativeapi.Rejection) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if r.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(r.RetryAfter))
	}
	w.WriteHeader(r.Status)
	return json.NewEncoder(w).Encode(r.Body)
}

// readOptionalJSON decodes a small JSON body into v; an empty body leaves
// v alone. A body that is not JSON is 400.
func readOptionalJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxControlBody+1))
	if err != nil {
		return httpx.ReadFailure(err, maxControlBody)
	}
	if len(body) > maxControlBody {
		return apierr.PayloadTooLarge(maxControlBody)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return apierr.InvalidRequest("the body must be a JSON object")
	}
	return nil
}

// listControl is the body of POST /queue and POST /history.
type listControl struct {
	Delete []string `json:"delete"`
	Clear  bool     `json:"clear"`
}

// postList serves POST /queue and POST /history: {"clear": true} and
// {"delete": [ids]}, either or both.
func postList(w http.ResponseWriter, r *http.Request, clear func(ctx context.Context) error,
	remove func(ctx context.Context, ids []string) error) error {
	var body listControl
	if err := readOptionalJSON(r, &body); err != nil {
		return err
	}
	if len(body.Delete) > storage.MaxNativeIDs {
		return apierr.InvalidRequest(fmt.Sprintf("delete at most %d prompts at once", storage.MaxNativeIDs))
	}
	if body.Clear {
		if err := clear(r.Context()); err != nil {
			return err
		}
	}
	if err := remove(r.Context(), body.Delete); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *Handler) getHistory(w http.ResponseWriter, r *http.Request, svc *nativeapi.Service, account, id string) error {
	if id != "" {
		comfygate.SetPlaceholder(r, comfygate.PlaceholderJobID, id) // a prompt's id is its job's
		hist, err := svc.HistoryOne(r.Context(), account, id)
		if err != nil {
			return err
		}
		return writeJSON(w, hist)
	}
	q := r.URL.Query()
	maxItems, err := intParam(q.Get("max_items"))
	if err != nil {
		return err
	}
	offset, err := intParam(q.Get("offset"))
	if err != nil {
		return err
	}
	hist, err := svc.History(r.Context(), account, maxItems, max(offset, 0))
	if err != nil {
		return err
	}
	return writeJSON(w, hist)
}

func intParam(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, apierr.InvalidRequest("max_items and offset must be integers")
	}
	return n, nil
}

func (h *Handler) view(w http.ResponseWriter, r *http.Request, svc *nativeapi.Service, account string) error {
	q := r.URL.Query()
	if !q.Has("filename") {
		return apierr.NotFound("no such file")
	}
	ref, err := nativeapi.ParseViewRef(q.Get("filename"), q.Get("subfolder"), q.Get("type"))
	if err != nil {
		return err
	}
	a, f, err := svc.Open(r.Context(), account, ref)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr := w.Header()
	hdr.Set("Content-Type", a.ContentType)
	hdr.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(a.FilePath)}))
	hdr.Set("ETag", `"`+strings.TrimPrefix(a.Hash, "blake3:")+`"`)
	hdr.Set("Cache-Control", "private, max-age=3600")
	httpx.UntrustedContent(hdr)
	// ServeContent answers Range (206/416), If-None-Match and HEAD.
	return httpx.ServeContent(w, r, a.CreatedAt, f)
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request, svc *nativeapi.Service, account string, mask bool) error {
	limit := svc.Assets.MaxUploadBytes + multipartSlack
	if r.ContentLength > limit {
		return apierr.PayloadTooLarge(svc.Assets.MaxUploadBytes)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	ref, err := svc.Upload(r.Context(), account, body, r.Header.Get("Content-Type"), mask)
	if err != nil {
		return err
	}
	return writeJSON(w, map[string]string{"name": ref.Filename, "subfolder": ref.Subfolder, "type": ref.Type})
}

func (h *Handler) objectInfo(w http.ResponseWriter, r *http.Request, class string) error {
	info, err := h.app.ObjectInfo(r.Context(), h.Pool)
	if err != nil {
		if _, typed := apierr.As(err); typed {
			return err
		}
		return apierr.Upstream(err)
	}
	if class == "" {
		return writeJSON(w, info)
	}
	out := map[string]json.RawMessage{}
	if entry, ok := info[class]; ok {
		out[class] = entry
	}
	return writeJSON(w, out) // an unknown class is {} with 200, as ComfyUI answers
}

// introspect answers what clients read at start. comfygate has no models,
// embeddings or frontend extensions of its own, and no GPU: the pool's
// workers have them.
func (h *Handler) introspect(w http.ResponseWriter, first, rest string) error {
	switch first {
	case "system_stats":
		osName := "posix"
		if runtime.GOOS == "windows" {
			osName = "nt"
		}
		return writeJSON(w, map[string]any{
			"system": map[string]any{"os": osName, "ram_total": 0, "ram_free": 0, "comfyui_version": "comfygate",
				"python_version": "", "pytorch_version": "", "embedded_python": false, "argv": []string{}},
			"devices": []any{},
		})
	case "features":
		return writeJSON(w, map[string]any{"supports_preview_metadata": true, "max_upload_size": h.app.MaxUploadBytes})
	case "embeddings", "extensions":
		return writeJSON(w, []string{})
	case "models":
		if rest != "" {
			return apierr.NotFound("no such model folder")
		}
		return writeJSON(w, []string{})
	}
	return apierr.NotFound("no such route")
}
