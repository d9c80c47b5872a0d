package comfyui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"

	"github.com/comfygate/comfygate/internal/tracing"
)

// maxJSONBody bounds a JSON answer read into memory (/object_info of a
// large install is a few megabytes).
const maxJSONBody = 64 << 20

// statusError is a worker's non-2xx answer.
type statusError struct {
	Route  string
	Status int
	Body   []byte
}

func (e *statusError) Error() string {
	return fmt.Sprintf("comfyui %s: HTTP %d", e.Route, e.Status)
}

// do sends one request bounded by RequestTimeout. The caller closes the
// body; closing it also releases the timeout.
func (w *worker) do(ctx context.Context, method, route string, query url.Values, body io.Reader, contentType string) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, w.pool.cfg.RequestTimeout)
	req, err := http.NewRequestWithContext(ctx, method, w.endpoint(route, query), body)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header = w.headers()
	tracing.Inject(ctx, req.Header)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("comfyui %s %s: %w", method, route, err)
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// call sends a request and reads the whole answer; a non-2xx answer is a
// *statusError carrying the body.
func (w *worker) call(ctx context.Context, method, route string, query url.Values, body io.Reader, contentType string) ([]byte, error) {
	resp, err := w.do(ctx, method, route, query, body, contentType)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody))
	if err != nil {
		return nil, fmt.Errorf("comfyui %s %s: reading the answer: %w", method, route, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, &statusError{Route: route, Status: resp.StatusCode, Body: data}
	}
	return data, nil
}

func (w *worker) getBytes(ctx context.Context, route string, query url.Values) ([]byte, error) {
	return w.call(ctx, http.MethodGet, route, query, nil, "")
}

func (w *worker) getJSON(ctx context.Context, route string, query url.Values, into any) error {
	data, err := w.getBytes(ctx, route, query)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, into); err != nil {
		return fmt.Errorf("comfyui GET %s: %w", route, err)
	}
	return nil
}

func (w *worker) postJSON(ctx context.Context, route string, body any) ([]byte, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return w.call(ctx, http.MethodPost, route, nil, bytes.NewReader(data), "application/json")
}

// uploaded is /upload/image's answer.
type uploaded struct {
	Name      string `json:"name"`
	Subfolder string `json:"subfolder"`
	Type      string `json:"type"`
}

// upload stages one input file: POST /upload/image with overwrite=true so
// that a retried attempt replaces its own earlier upload instead of getting
// a renamed copy.
func (w *worker) upload(ctx context.Context, subfolder, name string, content io.Reader) (uploaded, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := writeUploadForm(mw, subfolder, name, content)
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	data, err := w.call(ctx, http.MethodPost, "/upload/image", nil, pr, mw.FormDataContentType())
	pr.CloseWithError(io.ErrClosedPipe) // unblocks the writer if the request failed early
	if err != nil {
		return uploaded{}, err
	}
	var up uploaded
	if err := json.Unmarshal(data, &up); err != nil || up.Name == "" {
		return uploaded{}, &statusError{Route: "/upload/image", Status: http.StatusOK, Body: data}
	}
	return up, nil
}

func writeUploadForm(mw *multipart.Writer, subfolder, name string, content io.Reader) error {
	for _, f := range [][2]string{{"type", "input"}, {"subfolder", subfolder}, {"overwrite", "true"}} {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			return err
		}
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="image"; filename=%q`, name))
	h.Set("Content-Type", "application/octet-stream")
	part, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	_, err = io.Copy(part, content)
	return err
}

// view opens an output file: GET /view?filename=&subfolder=&type=.
func (w *worker) view(ctx context.Context, f fileRef) (io.ReadCloser, error) {
	q := url.Values{"filename": {f.Filename}, "subfolder": {f.Subfolder}, "type": {f.Type}}
	resp, err := w.do(ctx, http.MethodGet, "/view", q, nil, "")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, &statusError{Route: "/view", Status: resp.StatusCode}
	}
	return resp.Body, nil
}

// queueState is where GET /queue places a prompt.
type queueState int

const (
	notQueued queueState = iota
	pendingInQueue
	runningInQueue
)

// queuePosition reads where GET /queue places the prompt (see find).
func (w *worker) queuePosition(ctx context.Context, promptID string) (queueState, error) {
	l, err := w.find(ctx, promptID, "")
	return l.state, err
}

// historyEntry is one prompt's GET /history/{id} entry.
type historyEntry struct {
	Outputs map[string]map[string]json.RawMessage `json:"outputs"`
	Status  struct {
		StatusStr string              `json:"status_str"`
		Completed bool                `json:"completed"`
		Messages  [][]json.RawMessage `json:"messages"`
	} `json:"status"`
}

// history returns the prompt's entry, or nil when the worker has none (not
// finished, unknown, or lost on a restart: ComfyUI answers {} for all).
func (w *worker) history(ctx context.Context, promptID string) (*historyEntry, error) {
	var h map[string]historyEntry
	if err := w.getJSON(ctx, "/history/"+url.PathEscape(promptID), nil, &h); err != nil {
		return nil, err
	}
	e, ok := h[promptID]
	if !ok {
		return nil, nil
	}
	return &e, nil
}

// isTransport reports whether err means the worker did not answer at all.
func isTransport(err error) bool {
	var se *statusError
	return err != nil && !errors.As(err, &se)
}
