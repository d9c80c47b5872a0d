package comfyuipeer

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestLogAPI holds the peer to ComfyUI's log API: the three /internal
// routes and the "logs" socket message of a subscribed session.
func TestLogAPI(t *testing.T) {
	p := New(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	call := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequestWithContext(ctx, method, p.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	for _, bad := range []string{"", "{", `{"enabled": true}`, `{"clientId": "c"}`} {
		if st, _ := call(http.MethodPatch, "/internal/logs/subscribe", bad); st != 500 {
			t.Errorf("subscribe with %q = %d, want 500 as ComfyUI answers a KeyError", bad, st)
		}
	}
	conn, _, err := websocket.Dial(ctx, strings.Replace(p.URL, "http", "ws", 1)+"/ws?clientId=c1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	// The socket is registered under its client id just before the first
	// status message; a flush before that would unsubscribe c1 as one
	// without a socket (as ComfyUI does), so wait for it as clients do.
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(data, &m) == nil && m.Type == "status" {
			break
		}
	}
	if st, body := call(http.MethodPatch, "/internal/logs/subscribe", `{"clientId": "c1", "enabled": true}`); st != 200 || len(body) != 0 {
		t.Fatalf("subscribe = %d %q", st, body)
	}
	p.Print("first")
	p.Print("second")
	type msg struct {
		Type string `json:"type"`
		Data struct {
			Entries []logEntry      `json:"entries"`
			Size    json.RawMessage `json:"size"`
		} `json:"data"`
	}
	var logs []msg
	for len(logs) < 2 {
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m msg
		if json.Unmarshal(data, &m) == nil && m.Type == "logs" {
			logs = append(logs, m)
		}
	}
	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$`)
	for i, want := range []string{"first", "second"} {
		e := logs[i].Data.Entries
		if len(e) != 2 || e[0].M != want || e[1].M != "\n" || !stamp.MatchString(e[0].T) {
			t.Errorf("logs message %d entries = %+v, want a print's two writes", i, e)
		}
	}
	if !bytes.Contains(logs[0].Data.Size, []byte(`"cols"`)) || string(logs[1].Data.Size) != "null" {
		t.Errorf("size = %s then %s, want the terminal size once, then null", logs[0].Data.Size, logs[1].Data.Size)
	}

	_, body := call(http.MethodGet, "/internal/logs", "")
	var joined string
	if err := json.Unmarshal(body, &joined); err != nil || !regexp.MustCompile(`^\S+ - first\S+ - \n\S+ - second\S+ - \n$`).MatchString(joined) {
		t.Errorf("/internal/logs = %s (%v), want one string of \"t - m\"", body, err)
	}
	_, body = call(http.MethodGet, "/internal/logs/raw", "")
	var raw struct {
		Entries []logEntry     `json:"entries"`
		Size    map[string]int `json:"size"`
	}
	if err := json.Unmarshal(body, &raw); err != nil || len(raw.Entries) != 4 || raw.Size["cols"] == 0 {
		t.Errorf("/internal/logs/raw = %s", body)
	}

	// A session whose socket is gone is unsubscribed at the next flush.
	conn.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		_, open := p.sockets["c1"]
		p.mu.Unlock()
		if !open || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Print("nobody listens")
	p.mu.Lock()
	subscribed := p.logs.subs["c1"]
	p.mu.Unlock()
	if subscribed {
		t.Error("the session stayed subscribed after its socket closed")
	}
	for i := range logCapacity + 10 {
		p.Print(strings.Repeat("x", i%7))
	}
	if n := len(p.Logs()); n != logCapacity {
		t.Errorf("the buffer holds %d entries, want ComfyUI's %d", n, logCapacity)
	}
}
