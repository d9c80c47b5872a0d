package partner

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"
)

const prompt = `{"prompt":"a red fox","seed":7}`

func TestSyncJSONRoundTrip(t *testing.T) {
	t.Parallel()
	p := NewSyncJSON(t)
	r := call(t, p, http.MethodPost, p.URL+"/v1/images/generations?x=1", prompt, "X-Test", "yes")
	wantStatus(t, r, http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	m := r.obj(t)
	if m["prompt"] != "a red fox" || m["seed"] != float64(7) {
		t.Fatalf("input not echoed: %v", m)
	}
	images := m["images"].([]any)
	if len(images) != 1 {
		t.Fatalf("want one image, got %v", images)
	}
	media := call(t, p, http.MethodGet, images[0].(map[string]any)["url"].(string), "", "Authorization", "")
	wantStatus(t, media, http.StatusOK)
	if !bytes.Equal(media.body, pngPixel) || media.header.Get("Content-Type") != "image/png" {
		t.Fatalf("media not served: %q", media.body)
	}

	if p.Submissions() != 1 || p.InFlight() != 0 || p.MaxInFlight() != 1 {
		t.Fatalf("counters: submissions %d inflight %d max %d", p.Submissions(), p.InFlight(), p.MaxInFlight())
	}
	last := p.LastRequest()
	if last.Method != http.MethodPost || "http://"+last.Host != p.URL || last.Path != "/v1/images/generations" || last.Query != "x=1" ||
		string(last.Body) != prompt || last.Header.Get("X-Test") != "yes" ||
		last.Header.Get("Authorization") != "Bearer "+DefaultSecret {
		t.Fatalf("last request recorded wrongly: %+v", last)
	}
	if got := p.LastSubmit(); string(got.Body) != prompt {
		t.Fatalf("last submit %q", got.Body)
	}
	if len(p.Submitted()) != 1 {
		t.Fatalf("submitted history %d", len(p.Submitted()))
	}
}

func TestSyncAuth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		peer   func(testing.TB, ...Option) *Peer
		opts   []Option
		header []string
		want   int
	}{
		{"json missing", NewSyncJSON, nil, []string{"Authorization", ""}, http.StatusUnauthorized},
		{"json wrong", NewSyncJSON, nil, []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
		{"json custom ok", NewSyncJSON, []Option{WithAuth("X-Api-Key", "k1")}, []string{"X-Api-Key", "k1"}, http.StatusOK},
		{"json custom wrong", NewSyncJSON, []Option{WithAuth("X-Api-Key", "k1")}, []string{"X-Api-Key", "k2"}, http.StatusUnauthorized},
		{"json auth off", NewSyncJSON, []Option{WithAuth("", "")}, []string{"Authorization", ""}, http.StatusOK},
		{"bytes missing", NewSyncBytes, nil, []string{"xi-api-key", ""}, http.StatusUnauthorized},
		{"bytes ok", NewSyncBytes, nil, nil, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.peer(t, tc.opts...)
			r := call(t, p, http.MethodPost, p.URL+"/run", `{"text":"hi","prompt":"x"}`, tc.header...)
			wantStatus(t, r, tc.want)
			if tc.want == http.StatusUnauthorized && p.Submissions() != 0 {
				t.Fatalf("refused call counted as a submission")
			}
		})
	}
}

func TestSyncJSONSwitches(t *testing.T) {
	t.Parallel()
	custom := []Detail{{Loc: []any{"body", "image_url"}, Msg: "too small", Type: "image_too_small",
		Ctx: map[string]any{"min_width": 512}, Input: "https://x/y.png", URL: "https://docs.fal.ai/errors#image_too_small"}}
	tests := []struct {
		name  string
		opts  []Option
		check func(t *testing.T, r reply)
	}{
		{"latency", []Option{WithLatency(20 * time.Millisecond)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusOK)
		}},
		{"default validation", []Option{WithValidationError(nil)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusUnprocessableEntity)
			d := firstDetail(t, r.obj(t))
			if d["type"] != "less_than_equal" || d["input"] != float64(9) || d["ctx"].(map[string]any)["le"] != float64(4) {
				t.Fatalf("detail %v", d)
			}
		}},
		{"custom validation", []Option{WithValidationError(custom)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusUnprocessableEntity)
			var got struct{ Detail []Detail }
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(custom)
			have, _ := json.Marshal(got.Detail)
			if !bytes.Equal(want, have) {
				t.Fatalf("detail %s, want %s", have, want)
			}
		}},
		{"refusal", []Option{WithRefusal()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusBadRequest)
			e := r.obj(t)["error"].(map[string]any)
			if e["code"] != "content_policy_violation" || e["type"] != "invalid_request_error" {
				t.Fatalf("error %v", e)
			}
		}},
		{"output refusal", []Option{WithOutputRefusal()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusBadRequest)
		}},
		{"empty media", []Option{WithEmptyMedia()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusOK)
			if imgs := r.obj(t)["images"].([]any); len(imgs) != 0 {
				t.Fatalf("images %v", imgs)
			}
		}},
		{"status 503", []Option{WithStatus(503)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusServiceUnavailable)
			if r.obj(t)["error"].(map[string]any)["type"] != "server_error" {
				t.Fatalf("body %s", r.body)
			}
		}},
		{"result status 500", []Option{WithResultStatus(500)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusInternalServerError)
		}},
		{"garbage", []Option{WithGarbage()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusOK)
			if json.Valid(r.body) {
				t.Fatalf("garbage body is valid JSON: %s", r.body)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewSyncJSON(t, tc.opts...)
			tc.check(t, call(t, p, http.MethodPost, p.URL+"/fal-ai/flux/dev", prompt))
		})
	}
}

func TestSyncBytesSwitches(t *testing.T) {
	t.Parallel()
	const text = `{"text":"hello there","model_id":"eleven_v3"}`
	tests := []struct {
		name  string
		opts  []Option
		check func(t *testing.T, r reply)
	}{
		{"ok", nil, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusOK)
			if r.header.Get("Content-Type") != "audio/mpeg" || !bytes.HasPrefix(r.body, audioPrefix) ||
				!bytes.HasSuffix(r.body, []byte("hello there")) {
				t.Fatalf("audio %q (%s)", r.body, r.header.Get("Content-Type"))
			}
		}},
		{"validation", []Option{WithValidationError(nil)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusUnprocessableEntity)
			firstDetail(t, r.obj(t))
		}},
		{"refusal", []Option{WithRefusal()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusBadRequest)
			if r.obj(t)["detail"].(map[string]any)["status"] != "content_policy_violation" {
				t.Fatalf("body %s", r.body)
			}
		}},
		{"empty", []Option{WithEmptyMedia()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusOK)
			if len(r.body) != 0 || r.header.Get("Content-Type") != "audio/mpeg" {
				t.Fatalf("want empty audio, got %q", r.body)
			}
		}},
		{"status 429", []Option{WithStatus(429)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusTooManyRequests)
			if r.obj(t)["detail"].(map[string]any)["status"] != "too_many_concurrent_requests" {
				t.Fatalf("body %s", r.body)
			}
		}},
		{"garbage cuts the body", []Option{WithGarbage()}, func(t *testing.T, r reply) {
			if r.status != http.StatusOK || r.err == nil {
				t.Fatalf("want 200 with a body read error, got %d err %v", r.status, r.err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewSyncBytes(t, tc.opts...)
			tc.check(t, call(t, p, http.MethodPost, p.URL+"/v1/text-to-speech/voice1", text))
		})
	}
}

func TestSyncMalformedBodyAndMethod(t *testing.T) {
	t.Parallel()
	p := NewSyncJSON(t)
	r := call(t, p, http.MethodPost, p.URL+"/m", "not json")
	wantStatus(t, r, http.StatusUnprocessableEntity)
	firstDetail(t, r.obj(t))
	wantStatus(t, call(t, p, http.MethodGet, p.URL+"/m", ""), http.StatusMethodNotAllowed)
}

func TestSetOptionsMidTest(t *testing.T) {
	t.Parallel()
	p := NewSyncJSON(t)
	wantStatus(t, call(t, p, http.MethodPost, p.URL+"/m", prompt), http.StatusOK)
	p.SetOptions(WithStatus(502), WithRefusal())
	wantStatus(t, call(t, p, http.MethodPost, p.URL+"/m", prompt), http.StatusBadGateway)
	p.SetOptions(WithStatus(0))
	wantStatus(t, call(t, p, http.MethodPost, p.URL+"/m", prompt), http.StatusBadRequest)
	p.SetOptions(WithNoFaults())
	wantStatus(t, call(t, p, http.MethodPost, p.URL+"/m", prompt), http.StatusOK)
	if h, v := p.Credential(); h != "Authorization" || v != "Bearer "+DefaultSecret {
		t.Fatalf("WithNoFaults changed auth: %s %s", h, v)
	}
}

func TestSyncHangReleasedByClient(t *testing.T) {
	t.Parallel()
	for _, newPeer := range []func(testing.TB, ...Option) *Peer{NewSyncJSON, NewSyncBytes} {
		p := newPeer(t, WithHang())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan reply, 1)
		go func() { done <- callCtx(t, ctx, http.DefaultClient, p, http.MethodPost, p.URL+"/m", prompt) }()
		eventually(t, "request to hang", func() bool { return p.OpenRequests() == 1 })
		select {
		case r := <-done:
			t.Fatalf("hanging peer answered: %d %s", r.status, r.body)
		default:
		}
		cancel()
		if r := <-done; r.err == nil {
			t.Fatalf("want a transport error, got %d", r.status)
		}
		eventually(t, "handler to finish", func() bool { return p.OpenRequests() == 0 })
		if p.Submissions() != 0 {
			t.Fatalf("hung request counted as a submission")
		}
	}
}

func TestLatencyAbortedByClient(t *testing.T) {
	t.Parallel()
	p := NewSyncJSON(t, WithLatency(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan reply, 1)
	go func() { done <- callCtx(t, ctx, http.DefaultClient, p, http.MethodPost, p.URL+"/m", prompt) }()
	eventually(t, "call in flight", func() bool { return p.InFlight() == 1 })
	cancel()
	<-done
	eventually(t, "in flight back to zero", func() bool { return p.InFlight() == 0 })
	if !reflect.DeepEqual([]int{p.Submissions(), p.MaxInFlight()}, []int{1, 1}) {
		t.Fatalf("submissions %d max %d", p.Submissions(), p.MaxInFlight())
	}
}
