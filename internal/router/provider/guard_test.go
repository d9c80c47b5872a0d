package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHandleURLAllowed(t *testing.T) {
	m := testModel("http://127.0.0.1:8080/fal-ai/flux")
	for _, c := range []struct {
		url      string
		suffixes []string
		ok       bool
	}{
		{"http://127.0.0.1:8080/fal-ai/flux/requests/1/status", falHosts, true},
		{"HTTP://127.0.0.1:8080/x", falHosts, true},
		{"http://127.0.0.1:8081/x", falHosts, false},  // other port
		{"https://127.0.0.1:8080/x", falHosts, false}, // other scheme
		{"http://169.254.169.254/latest/meta-data", falHosts, false},
		{"https://queue.fal.run/fal-ai/flux/requests/1", falHosts, true},
		{"https://rest.alpha.fal.ai/x", falHosts, true},
		{"https://queue.fal.run:443/x", falHosts, true},
		{"https://queue.fal.run:8443/x", falHosts, false},
		{"http://queue.fal.run/x", falHosts, false},
		{"https://evilfal.run/x", falHosts, false},
		{"https://fal.run.evil.com/x", falHosts, false},
		{"https://user:pw@queue.fal.run/x", falHosts, false},
		{"https://api.us1.bfl.ai/v1/get_result?id=1", bflHosts, true},
		{"https://api.bfl.ai.evil.com/x", bflHosts, false},
		{"https://queue.fal.run/x", bflHosts, false},
		{"::not a url", falHosts, false},
	} {
		err := handleURLAllowed(m, c.url, c.suffixes)
		if (err == nil) != c.ok {
			t.Errorf("handleURLAllowed(%q) = %v, want ok=%v", c.url, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrHandleURL) {
			t.Errorf("handleURLAllowed(%q) error %v does not wrap ErrHandleURL", c.url, err)
		}
	}
}

// TestForeignHandleURLsGetNoCredential: a partner answer whose handle URLs
// point at another host is refused as provider_error, and that host never
// sees a request (so never the credential).
func TestForeignHandleURLsGetNoCredential(t *testing.T) {
	var foreignHits atomic.Int32
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		foreignHits.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer foreign.Close()
	partnerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/bfl") {
			fmt.Fprintf(w, `{"id":"1","polling_url":%q}`, foreign.URL+"/poll")
			return
		}
		fmt.Fprintf(w, `{"request_id":"1","status_url":%q,"response_url":%q,"cancel_url":%q}`,
			foreign.URL+"/s", foreign.URL+"/r", foreign.URL+"/c")
	}))
	defer partnerSrv.Close()
	c := NewClient(Options{AllowInsecure: true})
	ctx := context.Background()
	fm := testModel(partnerSrv.URL + "/fal-ai/flux")
	h, out, err := (&Fal{c: c}).Submit(ctx, fm, []byte(`{}`), nil)
	if err != nil || h != nil || out == nil || out.Bucket != BucketProviderError {
		t.Errorf("fal submit with foreign URLs: handle %+v outcome %+v err %v; want provider_error", h, out, err)
	}
	bm := testModel(partnerSrv.URL + "/bfl/flux-pro")
	h, out, err = (&BFL{c: c}).Submit(ctx, bm, []byte(`{}`), nil)
	if err != nil || h != nil || out == nil || out.Bucket != BucketProviderError {
		t.Errorf("bfl submit with a foreign URL: handle %+v outcome %+v err %v; want provider_error", h, out, err)
	}
	// Stored handles are checked again before every poll and cancel.
	stored := &Handle{Kind: "fal", StatusURL: foreign.URL + "/s", ResponseURL: foreign.URL + "/r", CancelURL: foreign.URL + "/c", PollingURL: foreign.URL + "/p"}
	if out, err := (&Fal{c: c}).Poll(ctx, fm, stored); err != nil || out == nil || out.Bucket != BucketProviderError {
		t.Errorf("fal poll of a foreign handle: %+v %v", out, err)
	}
	if out, err := (&BFL{c: c}).Poll(ctx, bm, stored); err != nil || out == nil || out.Bucket != BucketProviderError {
		t.Errorf("bfl poll of a foreign handle: %+v %v", out, err)
	}
	if err := (&Fal{c: c}).Cancel(ctx, fm, stored); !errors.Is(err, ErrHandleURL) {
		t.Errorf("fal cancel of a foreign handle: %v", err)
	}
	if n := foreignHits.Load(); n != 0 {
		t.Errorf("the foreign host received %d requests", n)
	}
}

func TestFalCancelAnswers(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		ok     bool
	}{
		{202, `{"status":"CANCELLATION_REQUESTED"}`, true},
		{400, `{"status":"ALREADY_COMPLETED"}`, true},
		{400, `{"detail":"bad request"}`, false},
		{404, `{"status":"NOT_FOUND"}`, false},
		{500, `{}`, false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.status)
			w.Write([]byte(c.body))
		}))
		m := testModel(srv.URL + "/fal-ai/flux")
		err := (&Fal{c: NewClient(Options{AllowInsecure: true})}).Cancel(context.Background(), m, &Handle{CancelURL: srv.URL + "/c"})
		if (err == nil) != c.ok {
			t.Errorf("cancel answered %d %s: err %v, want ok=%v", c.status, c.body, err, c.ok)
		}
		srv.Close()
	}
}

// TestResponseBudget: answers are read within a bounded budget of bytes in
// flight; a read that cannot get room fails with ErrResponseBudget, and the
// budget is returned after every read.
func TestResponseBudget(t *testing.T) {
	big := strings.Repeat("x", 300<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("chunked") != "" {
			w.Header().Set("Content-Type", "application/octet-stream")
			for range 5 {
				w.Write([]byte(big[:60<<10]))
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Write([]byte(big))
	}))
	defer srv.Close()
	c := NewClient(Options{AllowInsecure: true, ResponseBudget: 1 << 20, BudgetWait: 20 * time.Millisecond})
	m := testModel(srv.URL)
	ctx := context.Background()
	for _, q := range []string{"", "?chunked=1"} {
		a, err := c.Do(ctx, m, http.MethodGet, srv.URL+q, nil, nil)
		if err != nil || len(a.Body) == 0 {
			t.Fatalf("read %q with room: %v", q, err)
		}
		if n := c.budget.inUse(); n != 0 {
			t.Errorf("%d budget bytes held after the read", n)
		}
	}
	// Another answer holds most of the budget: no room for this one.
	if err := c.budget.acquire(ctx, 900<<10, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"", "?chunked=1"} {
		if _, err := c.Do(ctx, m, http.MethodGet, srv.URL+q, nil, nil); !errors.Is(err, ErrResponseBudget) {
			t.Errorf("read %q without room: err %v, want ErrResponseBudget", q, err)
		}
	}
	c.budget.release(900 << 10)
	if _, err := c.Do(ctx, m, http.MethodGet, srv.URL, nil, nil); err != nil {
		t.Errorf("read after the room came back: %v", err)
	}
	if n := c.budget.inUse(); n != 0 {
		t.Errorf("%d budget bytes held at the end", n)
	}
}

func TestResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := NewClient(Options{AllowInsecure: true, ResponseHeaderTimeout: 50 * time.Millisecond})
	_, err := c.Do(context.Background(), testModel(srv.URL), http.MethodGet, srv.URL, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Errorf("hung partner: err %v, want the response header timeout", err)
	}
}
