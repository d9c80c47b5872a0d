// Package native tests comfy_native, the ComfyUI-compatible front, on a
// real gateway process: the same jobs through both fronts, tenancy on
// every route that lists or serves something, and a prompt that survives
// the gateway being killed while it runs on a ComfyUI peer.
package native

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/comfygate/comfygate/tests/gateway"
)

// client is one account's view of a gateway.
type client struct {
	t    *testing.T
	base string
	key  string
}

func newClient(t *testing.T, g *gateway.Gateway, account string) *client {
	return &client{t: t, base: g.URL, key: gateway.CreateAPIKey(t, g, account)}
}

func (c *client) do(method, path string, body any) gateway.Response {
	c.t.Helper()
	var rd *bytes.Reader
	hdr := map[string]string{"Authorization": "Bearer " + c.key}
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
		hdr["Content-Type"] = "application/json"
	}
	return gateway.Do(c.t, method, c.base+path, rd, hdr)
}

// json sends a request that must answer 200 with JSON, decoded into out.
func (c *client) json(method, path string, body, out any) {
	c.t.Helper()
	r := c.do(method, path, body)
	if r.Status != http.StatusOK {
		c.t.Fatalf("%s %s: %d %s", method, path, r.Status, r.Body)
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, r.Body)
		}
	}
}

// upload sends data to /upload/image as name and returns the answer.
func (c *client) upload(name string, data []byte) map[string]string {
	c.t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	fw, _ := w.CreateFormFile("image", name)
	fw.Write(data)
	w.WriteField("overwrite", "true")
	w.Close()
	r := gateway.Do(c.t, http.MethodPost, c.base+"/upload/image", &buf,
		map[string]string{"Authorization": "Bearer " + c.key, "Content-Type": w.FormDataContentType()})
	if r.Status != http.StatusOK {
		c.t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	var out map[string]string
	json.Unmarshal(r.Body, &out)
	return out
}

// queue posts a prompt and returns its id.
func (c *client) queue(prompt map[string]any, clientID string) string {
	c.t.Helper()
	var out struct {
		PromptID string `json:"prompt_id"`
	}
	c.json(http.MethodPost, "/prompt", map[string]any{"prompt": prompt, "client_id": clientID}, &out)
	if out.PromptID == "" {
		c.t.Fatal("no prompt_id")
	}
	return out.PromptID
}

// historyEntry is the part of a /history entry the tests read.
type historyEntry struct {
	Prompt  []json.RawMessage                         `json:"prompt"`
	Outputs map[string]map[string][]map[string]string `json:"outputs"`
	Status  struct {
		StatusStr string `json:"status_str"`
		Completed bool   `json:"completed"`
	} `json:"status"`
}

func (c *client) history(path string) map[string]historyEntry {
	c.t.Helper()
	var h map[string]historyEntry
	c.json(http.MethodGet, path, nil, &h)
	return h
}

// waitHistory polls /history/{id} until the prompt is there.
func (c *client) waitHistory(id string, timeout time.Duration) historyEntry {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if e, ok := c.history("/history/" + id)[id]; ok {
			return e
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("prompt %s did not reach the history within %s", id, timeout)
	return historyEntry{}
}

// queueIDs lists the prompt ids /queue shows, running and pending.
func (c *client) queueIDs() (running, pending []string) {
	c.t.Helper()
	var q struct {
		Running [][]json.RawMessage `json:"queue_running"`
		Pending [][]json.RawMessage `json:"queue_pending"`
	}
	c.json(http.MethodGet, "/queue", nil, &q)
	ids := func(items [][]json.RawMessage) []string {
		var out []string
		for _, it := range items {
			var id string
			json.Unmarshal(it[1], &id)
			out = append(out, id)
		}
		return out
	}
	return ids(q.Running), ids(q.Pending)
}

// view downloads an output or input through /view.
func (c *client) view(ref map[string]string) gateway.Response {
	c.t.Helper()
	q := url.Values{"filename": {ref["filename"]}, "subfolder": {ref["subfolder"]}, "type": {ref["type"]}}
	return c.do(http.MethodGet, "/view?"+q.Encode(), nil)
}

// socket is an open /ws connection and what it received.
type socket struct {
	conn *websocket.Conn
	msgs chan map[string]any
}

// dial opens /ws?clientId= with the key as ?token=.
func (c *client) dial(clientID string) *socket {
	c.t.Helper()
	u := strings.Replace(c.base, "http", "ws", 1) + "/ws?" + url.Values{"clientId": {clientID}, "token": {c.key}}.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		c.t.Fatalf("dial %s: %v", u, err)
	}
	conn.SetReadLimit(16 << 20)
	s := &socket{conn: conn, msgs: make(chan map[string]any, 1024)}
	go func() {
		defer close(s.msgs)
		for {
			typ, data, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			if typ == websocket.MessageText {
				var m map[string]any
				if json.Unmarshal(data, &m) == nil {
					s.msgs <- m
				}
			}
		}
	}()
	c.t.Cleanup(func() { conn.CloseNow() })
	first := s.next(c.t, 10*time.Second)
	if first["type"] != "status" {
		c.t.Fatalf("first message %v, want status", first)
	}
	return s
}

// next returns the next message, failing after timeout.
func (s *socket) next(t *testing.T, timeout time.Duration) map[string]any {
	t.Helper()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			t.Fatal("the socket closed")
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("no message within %s", timeout)
	}
	return nil
}

// until reads messages until one of type typ for promptID, returning every
// message read (that one included).
func (s *socket) until(t *testing.T, typ, promptID string, timeout time.Duration) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var seen []map[string]any
	for {
		m := s.next(t, time.Until(deadline))
		seen = append(seen, m)
		if m["type"] == typ && promptOf(m) == promptID {
			return seen
		}
	}
}

// drain returns what arrives within d.
func (s *socket) drain(d time.Duration) []map[string]any {
	var seen []map[string]any
	timeout := time.After(d)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				return seen
			}
			seen = append(seen, m)
		case <-timeout:
			return seen
		}
	}
}

func promptOf(m map[string]any) string {
	data, _ := m["data"].(map[string]any)
	id, _ := data["prompt_id"].(string)
	return id
}

// invert is LoadImage → ImageInvert → SaveImage over an uploaded file.
func invert(image string) map[string]any {
	return map[string]any{
		"1": map[string]any{"class_type": "LoadImage", "inputs": map[string]any{"image": image}},
		"2": map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"1", 0}}},
		"3": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "native", "images": []any{"2", 0}}},
	}
}

// slow is a prompt that runs for seconds on the built-in executor (50
// blurs of 1024², about 0.2 s of CPU each).
func slow() map[string]any {
	p := map[string]any{"1": map[string]any{"class_type": "EmptyImage",
		"inputs": map[string]any{"width": 1024, "height": 1024, "batch_size": 1, "color": 1234567}}}
	prev := "1"
	for i := 10; i < 60; i++ {
		id := fmt.Sprint(i)
		p[id] = map[string]any{"class_type": "ImageBlur", "inputs": map[string]any{"image": []any{prev, 0}, "blur_radius": 31, "sigma": 3}}
		prev = id
	}
	p["99"] = map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "slow", "images": []any{prev, 0}}}
	return p
}

// checkInverted decodes a PNG and compares every pixel with the inverted
// gradient of gateway.GradientPNG(size).
func checkInverted(t *testing.T, data []byte, size int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("output is not a PNG: %v", err)
	}
	for y := 0; y < size; y++ {
		for x := 0; x < size; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			want := [3]uint8{gateway.ComfyInvert(uint8(x)), gateway.ComfyInvert(uint8(y)), gateway.ComfyInvert(uint8(x*7 + y*13))}
			if got := [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}; got != want {
				t.Fatalf("pixel %d,%d = %v, want %v", x, y, got, want)
			}
		}
	}
}

// only returns the single output file of a history entry.
func only(t *testing.T, e historyEntry) map[string]string {
	t.Helper()
	images := e.Outputs["3"]["images"]
	if len(images) != 1 {
		t.Fatalf("outputs %v, want one image of node 3", e.Outputs)
	}
	return images[0]
}

// startBuiltin is a gateway on the built-in pool with embedded storage.
func startBuiltin(t *testing.T) *gateway.Gateway {
	return gateway.Start(t, gateway.NativeConfig("storage embedded ./data", ""), gateway.Options{})
}
