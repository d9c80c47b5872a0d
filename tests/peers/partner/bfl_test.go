package partner

import (
	"encoding/json"
	"net/http"
	"testing"
)

// bflSubmit posts to a BFL peer and returns the polling URL.
func bflSubmit(t *testing.T, p *Peer) (id, polling string) {
	t.Helper()
	r := call(t, p, http.MethodPost, p.URL+"/v1/flux-pro-1.1", prompt)
	wantStatus(t, r, http.StatusOK)
	m := r.obj(t)
	return m["id"].(string), m["polling_url"].(string)
}

func bflPoll(t *testing.T, p *Peer, polling string) map[string]any {
	t.Helper()
	r := call(t, p, http.MethodGet, polling, "")
	wantStatus(t, r, http.StatusOK)
	return r.obj(t)
}

func TestBFLRoundTrip(t *testing.T) {
	t.Parallel()
	p := NewBFL(t, WithNeverComplete())
	id, polling := bflSubmit(t, p)
	if polling != p.URL+"/v1/get_result?id="+id {
		t.Fatalf("polling_url %s", polling)
	}
	if got := p.LastSubmit().Header.Get("x-key"); got != DefaultSecret {
		t.Fatalf("x-key %q", got)
	}
	if m := bflPoll(t, p, polling); m["status"] != "Pending" || m["id"] != id {
		t.Fatalf("poll %v", m)
	}
	if p.InFlight() != 1 {
		t.Fatalf("in flight %d while pending", p.InFlight())
	}
	p.CompleteAll()
	m := bflPoll(t, p, polling)
	res, _ := m["result"].(map[string]any)
	if m["status"] != "Ready" || res["prompt"] != "a red fox" || res["sample"] != p.mediaURL(id, config{}) {
		t.Fatalf("ready %v", m)
	}
	if p.InFlight() != 0 || p.MaxInFlight() != 1 || p.Submissions() != 1 {
		t.Fatalf("counters: inflight %d max %d subs %d", p.InFlight(), p.MaxInFlight(), p.Submissions())
	}
	wantStatus(t, call(t, p, http.MethodGet, res["sample"].(string), "", "x-key", ""), http.StatusOK)

	if m := bflPoll(t, p, p.URL+"/v1/get_result?id=nope"); m["status"] != "Task not found" {
		t.Fatalf("unknown task %v", m)
	}
}

func TestBFLAuthAndSubmitErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		opts   []Option
		header []string
		want   int
		check  func(t *testing.T, m map[string]any)
	}{
		{"no key", nil, []string{"x-key", ""}, http.StatusForbidden, nil},
		{"wrong key", nil, []string{"x-key", "nope"}, http.StatusForbidden, nil},
		{"credits", []Option{WithStatus(402)}, nil, http.StatusPaymentRequired, func(t *testing.T, m map[string]any) {
			if _, ok := m["detail"].(string); !ok {
				t.Fatalf("body %v", m)
			}
		}},
		{"too many", []Option{WithStatus(429)}, nil, http.StatusTooManyRequests, nil},
		{"validation", []Option{WithValidationError(nil)}, nil, http.StatusUnprocessableEntity, func(t *testing.T, m map[string]any) {
			if firstDetail(t, m)["type"] != "less_than_equal" {
				t.Fatalf("body %v", m)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewBFL(t, tc.opts...)
			r := call(t, p, http.MethodPost, p.URL+"/v1/flux-dev", prompt, tc.header...)
			wantStatus(t, r, tc.want)
			if tc.check != nil {
				tc.check(t, r.obj(t))
			}
			if p.Submissions() != 0 {
				t.Fatalf("refused submit counted")
			}
		})
	}
}

func TestBFLPollSwitches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  []Option
		check func(t *testing.T, r reply)
	}{
		{"request moderated at once", []Option{WithRefusal(), WithNeverComplete()}, func(t *testing.T, r reply) {
			m := r.obj(t)
			if m["status"] != "Request Moderated" || m["result"] != nil || m["details"] == nil {
				t.Fatalf("poll %v", m)
			}
		}},
		{"content moderated", []Option{WithOutputRefusal()}, func(t *testing.T, r reply) {
			if m := r.obj(t); m["status"] != "Content Moderated" || m["result"] != nil {
				t.Fatalf("poll %v", m)
			}
		}},
		{"error", []Option{WithResultStatus(500)}, func(t *testing.T, r reply) {
			if m := r.obj(t); m["status"] != "Error" {
				t.Fatalf("poll %v", m)
			}
		}},
		{"empty", []Option{WithEmptyMedia()}, func(t *testing.T, r reply) {
			m := r.obj(t)
			res := m["result"].(map[string]any)
			if _, has := res["sample"]; m["status"] != "Ready" || has {
				t.Fatalf("poll %v", m)
			}
		}},
		{"garbage", []Option{WithGarbage()}, func(t *testing.T, r reply) {
			if r.status != http.StatusOK || json.Valid(r.body) {
				t.Fatalf("poll %d %s", r.status, r.body)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewBFL(t, tc.opts...)
			_, polling := bflSubmit(t, p)
			tc.check(t, call(t, p, http.MethodGet, polling, ""))
			if p.InFlight() != 0 || p.Submissions() != 1 {
				t.Fatalf("inflight %d subs %d after a terminal poll", p.InFlight(), p.Submissions())
			}
		})
	}
}

func TestBFLHangOnPoll(t *testing.T) {
	t.Parallel()
	p := NewBFL(t)
	_, polling := bflSubmit(t, p)
	p.SetOptions(WithHang())
	done := make(chan reply, 1)
	go func() { done <- call(t, p, http.MethodGet, polling, "") }()
	eventually(t, "poll to hang", func() bool { return p.OpenRequests() == 1 })
	p.Close()
	if r := <-done; r.err == nil {
		t.Fatalf("want a dropped connection, got %d", r.status)
	}
}
