package realcomfy

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// A small client of the server's own API, for tests that compare what a
// gateway does with what ComfyUI does when sent the same thing directly.

var client = &http.Client{Timeout: time.Minute}

// Upload stores data as an input file (POST /upload/image, overwrite) and
// returns the value LoadImage takes for it.
func (srv *Server) Upload(t testing.TB, subfolder, name string, data []byte) string {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("subfolder", subfolder)
	_ = mw.WriteField("overwrite", "true")
	part, _ := mw.CreateFormFile("image", name)
	_, _ = part.Write(data)
	_ = mw.Close()
	var up struct{ Name, Subfolder string }
	srv.call(t, http.MethodPost, "/upload/image", mw.FormDataContentType(), &body, &up)
	if up.Subfolder == "" {
		return up.Name
	}
	return up.Subfolder + "/" + up.Name
}

// Queue submits a prompt (POST /prompt) and returns the id ComfyUI
// answers.
func (srv *Server) Queue(t testing.TB, prompt any) string {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"prompt": prompt, "client_id": "realcomfy"})
	var ans struct {
		PromptID string `json:"prompt_id"`
	}
	srv.call(t, http.MethodPost, "/prompt", "application/json", bytes.NewReader(raw), &ans)
	return ans.PromptID
}

// HistoryEntry is a prompt's /history entry.
type HistoryEntry struct {
	// PromptID is the prompt's id (the entry's key).
	PromptID string                          `json:"-"`
	Outputs  map[string]map[string][]FileRef `json:"outputs"`
	Status   struct {
		StatusStr string              `json:"status_str"`
		Completed bool                `json:"completed"`
		Messages  [][]json.RawMessage `json:"messages"`
	} `json:"status"`
}

// FileRef is a file of a node's output.
type FileRef struct {
	Filename  string `json:"filename"`
	Subfolder string `json:"subfolder"`
	Type      string `json:"type"`
}

// Run queues a prompt and waits (bounded by timeout) for its history entry.
func (srv *Server) Run(t testing.TB, prompt any, timeout time.Duration) HistoryEntry {
	t.Helper()
	id := srv.Queue(t, prompt)
	deadline := time.Now().Add(timeout)
	for {
		var h map[string]HistoryEntry
		srv.call(t, http.MethodGet, "/history/"+url.PathEscape(id), "", nil, &h)
		if e, ok := h[id]; ok {
			e.PromptID = id
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("ComfyUI %s: prompt %s did not end within %v", srv.URL, id, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// History is GET /history: every entry the server holds, by prompt id.
func (srv *Server) History(t testing.TB) map[string]HistoryEntry {
	t.Helper()
	var h map[string]HistoryEntry
	srv.call(t, http.MethodGet, "/history", "", nil, &h)
	return h
}

// Forget deletes a prompt's history entry (POST /history {"delete"}).
func (srv *Server) Forget(t testing.TB, promptID string) {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"delete": []string{promptID}})
	var none []byte
	srv.call(t, http.MethodPost, "/history", "application/json", bytes.NewReader(raw), &none)
}

// View downloads an output (GET /view).
func (srv *Server) View(t testing.TB, f FileRef) []byte {
	t.Helper()
	q := url.Values{"filename": {f.Filename}, "subfolder": {f.Subfolder}, "type": {f.Type}}
	var data []byte
	srv.call(t, http.MethodGet, "/view?"+q.Encode(), "", nil, &data)
	return data
}

// call sends one request and decodes a 200 answer into out (a *[]byte
// takes the raw body).
func (srv *Server) call(t testing.TB, method, route, contentType string, body io.Reader, out any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+route, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("ComfyUI %s %s: %v", method, route, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("ComfyUI %s %s: %v", method, route, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ComfyUI %s %s: %d %s", method, route, resp.StatusCode, data)
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("ComfyUI %s %s: %v in %.200s", method, route, err, data)
	}
}
