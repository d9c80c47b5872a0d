package provider

import (
	"encoding/json"
	"net/http"
	"testing"
)

// FuzzClassify reads partner answers as the router does. Whatever the
// partner sends, the router answers a status it may send, a success only
// without a bucket, and a refusal as a JSON body.
func FuzzClassify(f *testing.F) {
	for _, s := range []struct {
		status int
		ct     string
		body   string
	}{
		{200, "application/json", `{"images":[{"url":"https://x/a.png"}]}`},
		{200, "application/json", `{"images":[]}`},
		{200, "application/json; charset=utf-8", `{"data":[{"b64_json":""}]}`},
		{200, "image/png", "\x89PNG"},
		{200, "application/json", `{"images":`},
		{422, "application/json", `{"detail":[{"loc":["body","prompt"],"msg":"m","type":"missing"}]}`},
		{422, "application/json", `{"detail":"content_policy_violation"}`},
		{422, "text/plain", `nope`},
		{400, "application/json", `{"error":{"code":"moderation_blocked"}}`},
		{408, "", ""}, {500, "application/json", `{}`}, {0, "", ""}, {999, "", ""}, {302, "", ""},
	} {
		f.Add(s.status, s.ct, []byte(s.body), "")
	}
	f.Add(500, "", []byte(""), "request_timeout")
	m := testModel("https://partner.example/v1")
	f.Fuzz(func(t *testing.T, status int, ct string, body []byte, falErr string) {
		h := http.Header{}
		if falErr != "" {
			h.Set("X-Fal-Error-Type", falErr)
		}
		out := Classify(m, &Answer{Status: status, ContentType: ct, Body: body, Header: h})
		if out == nil {
			t.Fatal("no outcome")
		}
		if out.Status < 200 || out.Status > 599 {
			t.Fatalf("answer %d %q: the router would answer %d", status, body, out.Status)
		}
		if (out.Bucket == "") != (out.Status < 300) {
			t.Fatalf("answer %d %q: bucket %q with status %d", status, body, out.Bucket, out.Status)
		}
		if out.Bucket != "" && !json.Valid(out.Body) {
			t.Fatalf("answer %d %q: refusal body %q is not JSON", status, body, out.Body)
		}
		if out.Bucket == "" && (status < 200 || status > 299) {
			t.Fatalf("a %d answer became a success", status)
		}
	})
}
