package partner

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// falSubmit posts to a fal peer and returns the queue handle.
func falSubmit(t *testing.T, p *Peer, path string) (id, response, status, cancel string) {
	t.Helper()
	r := call(t, p, http.MethodPost, p.URL+path, prompt)
	wantStatus(t, r, http.StatusOK)
	m := r.obj(t)
	return m["request_id"].(string), m["response_url"].(string), m["status_url"].(string), m["cancel_url"].(string)
}

// falWait polls status_url until COMPLETED.
func falWait(t *testing.T, p *Peer, status string) {
	t.Helper()
	eventually(t, "COMPLETED", func() bool {
		r := call(t, p, http.MethodGet, status, "")
		return r.status == http.StatusOK && r.obj(t)["status"] == "COMPLETED"
	})
}

func TestFalQueueRoundTrip(t *testing.T) {
	t.Parallel()
	p := NewFalQueue(t, WithNeverComplete())
	id, response, status, cancel := falSubmit(t, p, "/fal-ai/flux/dev")

	base := p.URL + "/fal-ai/flux/requests/" + id
	if response != base || status != base+"/status" || cancel != base+"/cancel" {
		t.Fatalf("URLs must drop the subpath: %s %s %s", response, status, cancel)
	}
	if got := p.LastSubmit().Header.Get("Authorization"); got != "Key "+DefaultSecret {
		t.Fatalf("auth header %q", got)
	}

	first := call(t, p, http.MethodGet, status, "")
	wantStatus(t, first, http.StatusAccepted)
	if m := first.obj(t); m["status"] != "IN_QUEUE" || m["queue_position"] != float64(0) {
		t.Fatalf("first poll %v", m)
	}
	second := call(t, p, http.MethodGet, status+"?logs=1", "")
	wantStatus(t, second, http.StatusAccepted)
	if m := second.obj(t); m["status"] != "IN_PROGRESS" || m["logs"] == nil {
		t.Fatalf("second poll %v", m)
	}
	early := call(t, p, http.MethodGet, response, "")
	wantStatus(t, early, http.StatusBadRequest)
	if p.InFlight() != 1 {
		t.Fatalf("in flight %d before collection", p.InFlight())
	}

	p.CompleteAll()
	done := call(t, p, http.MethodGet, status, "")
	wantStatus(t, done, http.StatusOK)
	if done.obj(t)["status"] != "COMPLETED" {
		t.Fatalf("after CompleteAll: %s", done.body)
	}
	if p.InFlight() != 1 {
		t.Fatal("a status poll must not settle the job")
	}
	res := call(t, p, http.MethodGet, response, "")
	wantStatus(t, res, http.StatusOK)
	m := res.obj(t)
	if m["prompt"] != "a red fox" || len(m["images"].([]any)) != 1 {
		t.Fatalf("result %v", m)
	}
	if p.InFlight() != 0 || p.MaxInFlight() != 1 || p.Submissions() != 1 {
		t.Fatalf("counters: inflight %d max %d subs %d", p.InFlight(), p.MaxInFlight(), p.Submissions())
	}
	// Collecting again is allowed and does not unbalance the counter.
	wantStatus(t, call(t, p, http.MethodGet, response, ""), http.StatusOK)
	if p.InFlight() != 0 {
		t.Fatalf("in flight %d after a second collection", p.InFlight())
	}
}

func TestFalQueueTopLevelModelAndUnknownRequest(t *testing.T) {
	t.Parallel()
	p := NewFalQueue(t)
	id, response, status, _ := falSubmit(t, p, "/fal-ai/fast-sdxl")
	if !strings.HasSuffix(response, "/fal-ai/fast-sdxl/requests/"+id) {
		t.Fatalf("response_url %s", response)
	}
	falWait(t, p, status)
	// The same id under another model id is not found.
	wantStatus(t, call(t, p, http.MethodGet, p.URL+"/fal-ai/other/requests/"+id, ""), http.StatusNotFound)
	wantStatus(t, call(t, p, http.MethodGet, p.URL+"/fal-ai/fast-sdxl/requests/nope/status", ""), http.StatusNotFound)
}

func TestFalQueueAuth(t *testing.T) {
	t.Parallel()
	p := NewFalQueue(t, WithNeverComplete())
	_, response, status, cancel := falSubmit(t, p, "/fal-ai/flux/dev")
	for _, c := range []struct{ method, url string }{
		{http.MethodPost, p.URL + "/fal-ai/flux/dev"},
		{http.MethodGet, status},
		{http.MethodGet, response},
		{http.MethodPut, cancel},
	} {
		for _, bad := range []string{"", "Key wrong", "Bearer " + DefaultSecret} {
			r := call(t, p, c.method, c.url, prompt, "Authorization", bad)
			wantStatus(t, r, http.StatusUnauthorized)
		}
	}
	if p.Submissions() != 1 || p.Cancels() != 0 {
		t.Fatalf("refused calls changed counters: subs %d cancels %d", p.Submissions(), p.Cancels())
	}
}

func TestFalQueueCancel(t *testing.T) {
	t.Parallel()
	p := NewFalQueue(t, WithNeverComplete())
	_, response, status, cancel := falSubmit(t, p, "/fal-ai/flux/dev")
	r := call(t, p, http.MethodPut, cancel, "")
	wantStatus(t, r, http.StatusAccepted)
	if r.obj(t)["status"] != "CANCELLATION_REQUESTED" {
		t.Fatalf("cancel %s", r.body)
	}
	if p.Cancels() != 1 || p.InFlight() != 0 {
		t.Fatalf("cancels %d inflight %d", p.Cancels(), p.InFlight())
	}
	again := call(t, p, http.MethodPut, cancel, "")
	wantStatus(t, again, http.StatusBadRequest)
	if again.obj(t)["status"] != "ALREADY_COMPLETED" {
		t.Fatalf("second cancel %s", again.body)
	}
	wantStatus(t, call(t, p, http.MethodGet, status, ""), http.StatusOK)
	res := call(t, p, http.MethodGet, response, "")
	wantStatus(t, res, 499)
	if res.header.Get("X-Fal-Error-Type") != "client_cancelled" {
		t.Fatalf("cancelled result headers %v", res.header)
	}
	missing := call(t, p, http.MethodPut, p.URL+"/fal-ai/flux/requests/nope/cancel", "")
	wantStatus(t, missing, http.StatusNotFound)
	if missing.obj(t)["status"] != "NOT_FOUND" || p.Cancels() != 1 {
		t.Fatalf("unknown cancel %s, cancels %d", missing.body, p.Cancels())
	}
}

func TestFalQueueResultSwitches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  []Option
		check func(t *testing.T, r reply)
	}{
		{"latency", []Option{WithLatency(30 * time.Millisecond)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusOK)
		}},
		{"validation", []Option{WithValidationError(nil)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusUnprocessableEntity)
			d := firstDetail(t, r.obj(t))
			if d["type"] != "less_than_equal" || d["url"] == nil || r.header.Get("X-Fal-Retryable") != "false" {
				t.Fatalf("detail %v headers %v", d, r.header)
			}
		}},
		{"refusal", []Option{WithRefusal()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusUnprocessableEntity)
			d := firstDetail(t, r.obj(t))
			if d["type"] != "content_policy_violation" || d["input"] != "a red fox" {
				t.Fatalf("detail %v", d)
			}
		}},
		{"output refusal", []Option{WithOutputRefusal()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusUnprocessableEntity)
		}},
		{"result timeout", []Option{WithResultStatus(504)}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusGatewayTimeout)
			m := r.obj(t)
			if m["error_type"] != "request_timeout" || r.header.Get("X-Fal-Error-Type") != "request_timeout" {
				t.Fatalf("body %v headers %v", m, r.header)
			}
			if _, isString := m["detail"].(string); !isString {
				t.Fatalf("request errors have a flat detail: %v", m)
			}
		}},
		{"garbage", []Option{WithGarbage()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusOK)
			if json.Valid(r.body) {
				t.Fatalf("garbage is valid JSON: %s", r.body)
			}
		}},
		{"empty media", []Option{WithEmptyMedia()}, func(t *testing.T, r reply) {
			wantStatus(t, r, http.StatusOK)
			if imgs := r.obj(t)["images"].([]any); len(imgs) != 0 {
				t.Fatalf("images %v", imgs)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewFalQueue(t, tc.opts...)
			_, response, status, _ := falSubmit(t, p, "/fal-ai/flux/dev")
			// Switches are captured at submit: turning them off must not
			// change this job.
			p.SetOptions(WithNoFaults())
			falWait(t, p, status)
			tc.check(t, call(t, p, http.MethodGet, response, ""))
			if p.InFlight() != 0 {
				t.Fatalf("in flight %d after the terminal answer", p.InFlight())
			}
		})
	}
}

func TestFalQueueStatusSwitch(t *testing.T) {
	t.Parallel()
	p := NewFalQueue(t, WithStatus(503))
	r := call(t, p, http.MethodPost, p.URL+"/fal-ai/flux/dev", prompt)
	wantStatus(t, r, http.StatusServiceUnavailable)
	if r.obj(t)["error_type"] != "runner_scheduling_failure" || r.header.Get("X-Fal-Error-Type") != "runner_scheduling_failure" {
		t.Fatalf("body %s headers %v", r.body, r.header)
	}
	if p.Submissions() != 0 || p.InFlight() != 0 {
		t.Fatalf("refused submit counted: %d", p.Submissions())
	}
	// Submit healthy, then fail the polls.
	p.SetOptions(WithStatus(0))
	_, _, status, _ := falSubmit(t, p, "/fal-ai/flux/dev")
	p.SetOptions(WithStatus(500))
	wantStatus(t, call(t, p, http.MethodGet, status, ""), http.StatusInternalServerError)
}
