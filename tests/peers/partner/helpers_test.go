package partner

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// reply is a fully read HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
	err    error // transport or body-read error
}

// call sends one request with the peer's own credential (unless hdr overrides
// it) and reads the whole answer.
func call(t testing.TB, p *Peer, method, url string, body string, hdr ...string) reply {
	t.Helper()
	return callCtx(t, context.Background(), http.DefaultClient, p, method, url, body, hdr...)
}

func callCtx(t testing.TB, ctx context.Context, c *http.Client, p *Peer, method, url string, body string, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if h, v := p.Credential(); h != "" {
		req.Header.Set(h, v)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// obj decodes a JSON object answer, failing the test if it is not one.
func (r reply) obj(t testing.TB) map[string]any {
	t.Helper()
	if r.err != nil {
		t.Fatalf("transport error: %v", r.err)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object (status %d): %q", r.status, r.body)
	}
	return m
}

// firstDetail returns detail[0] of a FastAPI-style 422 body.
func firstDetail(t testing.TB, m map[string]any) map[string]any {
	t.Helper()
	d, ok := m["detail"].([]any)
	if !ok || len(d) == 0 {
		t.Fatalf("detail is not a non-empty array: %v", m)
	}
	return d[0].(map[string]any)
}

// eventually polls cond until it holds, failing after a generous bound.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wantStatus fails unless r answered code.
func wantStatus(t testing.TB, r reply, code int) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("want status %d, got transport error %v", code, r.err)
	}
	if r.status != code {
		t.Fatalf("want status %d, got %d: %s", code, r.status, r.body)
	}
}
