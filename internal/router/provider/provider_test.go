package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/internal/router/catalog"
)

func testModel(upstream string) *catalog.Model {
	return &catalog.Model{ID: "p/m", Adapter: catalog.AdapterHTTP, Upstream: upstream,
		Credential: "partner-key", CredentialHeader: "Authorization", CredentialPrefix: "Bearer", PriceCents: 5,
		Billing: catalog.Billing{ChargesOnPolicyRejection: catalog.ChargesYes}}
}

func TestPublicAddr(t *testing.T) {
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"8.8.8.8", true}, {"2606:4700::1111", true},
		{"127.0.0.1", false}, {"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"100.64.0.1", false}, {"0.0.0.0", false}, {"::1", false},
		{"::ffff:127.0.0.1", false}, {"fe80::1", false}, {"fc00::1", false}, {"224.0.0.1", false},
		{"64:ff9b::a9fe:a9fe", false}, {"64:ff9b::808:808", false}, {"64:ff9b:1::a00:1", false},
		{"2002:a9fe:a9fe::1", false}, {"2002:808:808::1", false},
	} {
		if got := PublicAddr(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("PublicAddr(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
}

func TestClientRefusesPrivateAndPlainHTTP(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	strict := NewClient(Options{})
	_, err := strict.Do(context.Background(), testModel(srv.URL), http.MethodPost, srv.URL, []byte(`{}`), nil)
	if !errors.Is(err, ErrBlockedAddress) {
		t.Errorf("https to loopback: err %v, want ErrBlockedAddress at dial time", err)
	}
	_, err = strict.Do(context.Background(), testModel("http://example.com"), http.MethodPost, "http://example.com/x", []byte(`{}`), nil)
	if !errors.Is(err, ErrInsecureScheme) {
		t.Errorf("plain http: err %v, want ErrInsecureScheme", err)
	}
}

func TestOutboundHeaders(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Set-Cookie", "s=1")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"images":[{"url":"u"}]}`))
	}))
	defer srv.Close()
	in := http.Header{
		"Authorization": {"Bearer client-jwt"}, "X-Forwarded-For": {"1.2.3.4"}, "X-Forwarded-Proto": {"https"},
		"Connection": {"keep-alive"}, "Cookie": {"a=b"}, "Idempotency-Key": {"k"}, "Content-Type": {"application/json"},
		"X-Custom": {"dropped"}, "X-Fal-No-Retry": {"1"},
	}
	a, err := NewClient(Options{AllowInsecure: true}).Do(context.Background(), testModel(srv.URL), http.MethodPost, srv.URL, []byte(`{}`), in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Get("Authorization") != "Bearer partner-key" {
		t.Errorf("Authorization %q, want the partner credential", got.Get("Authorization"))
	}
	for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "Cookie", "Idempotency-Key", "X-Custom"} {
		if got.Get(h) != "" {
			t.Errorf("%s forwarded: %q", h, got.Get(h))
		}
	}
	if got.Get("X-Fal-No-Retry") != "1" || got.Get("Content-Type") != "application/json" {
		t.Errorf("safe headers dropped: %v", got)
	}
	out := Classify(testModel(srv.URL), a)
	if out.Bucket != "" || out.Status != 200 {
		t.Errorf("classified %+v", out)
	}
}

func TestClassify(t *testing.T) {
	m := testModel("https://x")
	js := "application/json"
	for _, c := range []struct {
		name     string
		a        Answer
		bucket   string
		status   int
		billable bool
	}{
		{"success", Answer{Status: 200, ContentType: js, Body: []byte(`{"images":[{"url":"u"}]}`)}, "", 200, true},
		{"bytes", Answer{Status: 200, ContentType: "audio/mpeg", Body: []byte("ID3")}, "", 200, true},
		{"no media keys at all", Answer{Status: 200, ContentType: js, Body: []byte(`{"text":"hi"}`)}, "", 200, true},
		{"empty media", Answer{Status: 200, ContentType: js, Body: []byte(`{"images":[]}`)}, BucketContentPolicy, 400, true},
		{"all nsfw", Answer{Status: 200, ContentType: js, Body: []byte(`{"images":[{"url":"u"}],"has_nsfw_concepts":[true]}`)}, BucketContentPolicy, 400, true},
		{"empty body", Answer{Status: 200, ContentType: "audio/mpeg"}, BucketContentPolicy, 400, true},
		{"truncated json", Answer{Status: 200, ContentType: js, Body: []byte(`{"images":[`)}, BucketProviderError, 502, false},
		{"json array", Answer{Status: 200, ContentType: js, Body: []byte(`[1]`)}, BucketProviderError, 502, false},
		{"422 detail", Answer{Status: 422, ContentType: js, Body: []byte(`{"detail":[{"loc":["body","n"],"msg":"m","type":"greater_than","ctx":{"gt":1}}]}`)}, BucketInvalidInput, 422, false},
		{"422 policy", Answer{Status: 422, ContentType: js, Body: []byte(`{"detail":[{"loc":["body"],"msg":"m","type":"content_policy_violation"}]}`)}, BucketContentPolicy, 400, true},
		{"422 string", Answer{Status: 422, ContentType: js, Body: []byte(`{"detail":"bad"}`)}, BucketProviderError, 502, false},
		{"400 moderation", Answer{Status: 400, ContentType: js, Body: []byte(`{"error":{"code":"moderation_blocked"}}`)}, BucketContentPolicy, 400, true},
		{"400 other", Answer{Status: 400, ContentType: js, Body: []byte(`{"error":{"code":"bad"}}`)}, BucketProviderError, 502, false},
		{"400 OpenAI content policy", Answer{Status: 400, ContentType: js, Body: []byte(`{"error":{"code":"content_policy_violation","message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error"}}`)}, BucketContentPolicy, 400, true},
		{"400 detail status", Answer{Status: 400, ContentType: js, Body: []byte(`{"detail":{"status":"content_policy_violation","message":"m"}}`)}, BucketContentPolicy, 400, true},
		{"400 detail list type", Answer{Status: 400, ContentType: js, Body: []byte(`{"detail":[{"msg":"m","type":"content_policy_violation"}]}`)}, BucketContentPolicy, 400, true},
		{"400 top-level type", Answer{Status: 400, ContentType: js, Body: []byte(`{"type":"moderation","message":"m"}`)}, BucketContentPolicy, 400, true},
		// Found by the router review: the words in a message are not a refusal.
		{"400 parameter named safety", Answer{Status: 400, ContentType: js, Body: []byte(`{"detail":"enable_safety_checker must be a boolean"}`)}, BucketProviderError, 502, false},
		{"400 parameter named nsfw", Answer{Status: 400, ContentType: js, Body: []byte(`{"error":{"message":"unknown parameter nsfw_level"}}`)}, BucketProviderError, 502, false},
		{"400 text", Answer{Status: 400, ContentType: "text/plain", Body: []byte(`moderation service unavailable`)}, BucketProviderError, 502, false},
		{"504", Answer{Status: 504, ContentType: js, Body: []byte(`{}`)}, BucketProviderTimout, 504, false},
		{"500", Answer{Status: 500, ContentType: js, Body: []byte(`{}`)}, BucketProviderError, 502, false},
		{"429", Answer{Status: 429, ContentType: js, Body: []byte(`{}`)}, BucketProviderError, 502, false},
		{"empty media with spaces", Answer{Status: 200, ContentType: js, Body: []byte(`{"images": [ ], "video": null, "audio_url": ""}`)}, BucketContentPolicy, 400, true},
		{"one media member set", Answer{Status: 200, ContentType: js, Body: []byte(`{"images":[],"video":{"url":"v"}}`)}, "", 200, true},
		{"empty object media", Answer{Status: 200, ContentType: js, Body: []byte(`{"output": { }}`)}, BucketContentPolicy, 400, true},
		{"some nsfw", Answer{Status: 200, ContentType: js, Body: []byte(`{"images":[{"url":"u"},{"url":"v"}],"has_nsfw_concepts":[true, false]}`)}, "", 200, true},
		{"all nsfw spaced", Answer{Status: 200, ContentType: js, Body: []byte(`{"images":[{"url":"u"},{"url":"v"}],"has_nsfw_concepts":[ true , true ]}`)}, BucketContentPolicy, 400, true},
		{"nsfw not bools", Answer{Status: 200, ContentType: js, Body: []byte(`{"images":[{"url":"u"}],"has_nsfw_concepts":[{"a":true}]}`)}, "", 200, true},
		{"json null", Answer{Status: 200, ContentType: js, Body: []byte(`null`)}, BucketProviderError, 502, false},
		{"json string", Answer{Status: 200, ContentType: js, Body: []byte(`"x"`)}, BucketProviderError, 502, false},
		{"trailing garbage", Answer{Status: 200, ContentType: js, Body: []byte(`{"images":[{"url":"u"}]} x`)}, BucketProviderError, 502, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.a.Header == nil {
				c.a.Header = http.Header{}
			}
			o := Classify(m, &c.a)
			if o.Bucket != c.bucket || o.Status != c.status || o.Billable != c.billable {
				t.Errorf("got bucket %q status %d billable %v, want %q %d %v", o.Bucket, o.Status, o.Billable, c.bucket, c.status, c.billable)
			}
			if c.bucket == BucketInvalidInput && !strings.Contains(string(o.Body), `"ctx":{"gt":1}`) {
				t.Errorf("422 detail not passed through: %s", o.Body)
			}
			if c.bucket != "" && c.bucket != BucketInvalidInput && !strings.Contains(string(o.Body), `"error_type":"`+c.bucket+`"`) {
				t.Errorf("error body %s", o.Body)
			}
		})
	}
}

// timeoutErr is a net.Error that timed out, as the transport's are.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestFailureBucket: the bucket a failed partner request's span carries.
func TestFailureBucket(t *testing.T) {
	m := testModel("https://partner.test/v1")
	answer := func(status int, body string) *Answer {
		return &Answer{Status: status, ContentType: "application/json", Body: []byte(body), Header: http.Header{}}
	}
	for _, c := range []struct {
		name string
		a    *Answer
		err  error
		want string
	}{
		{"200", answer(200, `{"images":[{"url":"x"}]}`), nil, ""},
		{"202 accepted", answer(202, `{"request_id":"r"}`), nil, ""},
		{"500", answer(500, `{"error":"boom"}`), nil, BucketProviderError},
		{"504", answer(504, `{}`), nil, BucketProviderTimout},
		{"422 detail", answer(422, `{"detail":[{"type":"less_than_equal"}]}`), nil, BucketInvalidInput},
		{"400 policy", answer(400, `{"error":{"code":"content_policy_violation"}}`), nil, BucketContentPolicy},
		{"refused dial", nil, errors.New("connection refused"), BucketProviderError},
		{"transport timeout", nil, fmt.Errorf("provider: POST x: %w", timeoutErr{}), BucketProviderTimout},
		{"deadline", nil, fmt.Errorf("read: %w", context.DeadlineExceeded), BucketProviderTimout},
		{"budget", nil, fmt.Errorf("read: %w", ErrResponseBudget), BucketServiceUnavailable},
	} {
		if got := failureBucket(m, c.a, c.err); got != c.want {
			t.Errorf("%s: failureBucket = %q, want %q", c.name, got, c.want)
		}
	}
}
