package comfyreal

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// side is one ComfyUI API as a client sees it: the real server, or the
// gateway's ComfyUI-compatible front (with its API key).
type side struct {
	name, base, key string
}

// call sends one request and returns its status, headers and body.
func (s side) call(t *testing.T, method, route, contentType string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+route, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if s.key != "" {
		req.Header.Set("Authorization", "Bearer "+s.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s %s: %v", s.name, method, route, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s %s: %v", s.name, method, route, err)
	}
	return resp.StatusCode, resp.Header, data
}

// json sends a request that must answer 200 and returns its JSON.
func (s side) json(t *testing.T, method, route string, body any) any {
	t.Helper()
	var raw []byte
	ct := ""
	if body != nil {
		raw, _ = json.Marshal(body)
		ct = "application/json"
	}
	st, _, data := s.call(t, method, route, ct, raw)
	if st != http.StatusOK {
		t.Fatalf("%s %s %s: %d %s", s.name, method, route, st, data)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s %s %s: %v in %.200s", s.name, method, route, err, data)
	}
	return out
}

// upload posts data to /upload/image as name and returns the answer.
func (s side) upload(t *testing.T, name string, data []byte, overwrite bool) any {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if overwrite {
		_ = mw.WriteField("overwrite", "true")
	}
	part, _ := mw.CreateFormFile("image", name)
	_, _ = part.Write(data)
	_ = mw.Close()
	st, _, answer := s.call(t, http.MethodPost, "/upload/image", mw.FormDataContentType(), body.Bytes())
	if st != http.StatusOK {
		t.Fatalf("%s upload: %d %s", s.name, st, answer)
	}
	var out any
	_ = json.Unmarshal(answer, &out)
	return out
}

// queue posts a prompt for clientID and returns its id.
func (s side) queue(t *testing.T, prompt map[string]any, clientID string) string {
	t.Helper()
	ans, _ := s.json(t, http.MethodPost, "/prompt", map[string]any{"prompt": prompt, "client_id": clientID}).(map[string]any)
	id, _ := ans["prompt_id"].(string)
	if id == "" {
		t.Fatalf("%s: no prompt_id in %v", s.name, ans)
	}
	return id
}

// wsConn is an open /ws and the text messages it received.
type wsConn struct {
	conn *websocket.Conn
	msgs chan map[string]any
}

func (s side) dial(t *testing.T, clientID string) *wsConn {
	t.Helper()
	q := url.Values{"clientId": {clientID}}
	if s.key != "" {
		q.Set("token", s.key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, strings.Replace(s.base, "http", "ws", 1)+"/ws?"+q.Encode(), nil)
	if err != nil {
		t.Fatalf("%s: dial: %v", s.name, err)
	}
	conn.SetReadLimit(16 << 20)
	w := &wsConn{conn: conn, msgs: make(chan map[string]any, 4096)}
	go func() {
		defer close(w.msgs)
		for {
			typ, data, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			var m map[string]any
			if typ == websocket.MessageText && json.Unmarshal(data, &m) == nil {
				w.msgs <- m
			}
		}
	}()
	t.Cleanup(func() { conn.CloseNow() })
	return w
}

// until reads messages until one matches done (then d more), returning all.
func (w *wsConn) until(t *testing.T, what string, timeout, d time.Duration, done func(map[string]any) bool) []map[string]any {
	t.Helper()
	var seen []map[string]any
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-w.msgs:
			if !ok {
				t.Fatalf("the socket closed before %s", what)
			}
			seen = append(seen, m)
			if done(m) {
				return append(seen, w.drain(d)...)
			}
		case <-deadline:
			t.Fatalf("no %s within %v: %v", what, timeout, seen)
		}
	}
}

func (w *wsConn) drain(d time.Duration) []map[string]any {
	var seen []map[string]any
	timeout := time.After(d)
	for {
		select {
		case m, ok := <-w.msgs:
			if !ok {
				return seen
			}
			seen = append(seen, m)
		case <-timeout:
			return seen
		}
	}
}

// ended is the prompt's executing null.
func ended(id string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		d, _ := m["data"].(map[string]any)
		node, has := d["node"]
		return m["type"] == "executing" && has && node == nil && d["prompt_id"] == id
	}
}
