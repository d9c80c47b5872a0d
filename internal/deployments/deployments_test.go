package deployments

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage"
)

func TestIDFromHost(t *testing.T) {
	ds := NewDomains([]string{"run.example.com", "stg.run.example.com.", "OTHER.test"})
	cases := []struct {
		host, id string
		ok       bool
	}{
		{"dep-1.run.example.com", "dep-1", true},
		{"dep-1.run.example.com:8443", "dep-1", true},
		{"DEP-1.Run.Example.COM", "dep-1", true},
		{"dep-1.run.example.com.", "dep-1", true},
		{"dep-1.stg.run.example.com", "dep-1", true},
		{"x.other.test", "x", true},
		{"stg.run.example.com", "stg", true}, // a label under run.example.com; the registry decides
		{"a.b.run.example.com", "", false},
		{"run.example.com", "", false},
		{".run.example.com", "", false},
		{"dep-1.example.com", "", false},
		{"dep-1.run.example.com.evil.test", "", false},
		{"127.0.0.1:8080", "", false},
		{"[::1]:8080", "", false},
		{"", "", false},
	}
	for _, c := range cases {
		id, ok := ds.IDFromHost(c.host)
		if id != c.id || ok != c.ok {
			t.Errorf("IDFromHost(%q) = %q, %v; want %q, %v", c.host, id, ok, c.id, c.ok)
		}
	}
	if id, ok := NewDomains(nil).IDFromHost("a.run.example.com"); ok {
		t.Errorf("no domains resolved %q", id)
	}
}

func TestIDFromPath(t *testing.T) {
	cases := []struct {
		path, id, mount, rest string
		ok                    bool
	}{
		{"/deployment/dep-1/api/v2/jobs", "dep-1", "/deployment/dep-1", "/api/v2/jobs", true},
		{"/deployment/dep-1/", "dep-1", "/deployment/dep-1", "/", true},
		{"/deployment/dep-1", "dep-1", "/deployment/dep-1", "", true},
		{"/deployment//api/v2/jobs", "", "/deployment/", "/api/v2/jobs", true},
		{"/deployment/UPPER/api/v2", "UPPER", "/deployment/UPPER", "/api/v2", true},
		{"/api/v2/jobs", "", "", "", false},
		{"/deploymentx/a", "", "", "", false},
		{"/x/deployment/a/api/v2", "", "", "", false},
	}
	for _, c := range cases {
		id, mount, rest, ok := IDFromPath(c.path)
		if id != c.id || mount != c.mount || rest != c.rest || ok != c.ok {
			t.Errorf("IDFromPath(%q) = %q %q %q %v; want %q %q %q %v", c.path, id, mount, rest, ok, c.id, c.mount, c.rest, c.ok)
		}
	}
}

// TestResolve: the host names the deployment, else the path prefix; a
// host-addressed request may repeat its own id as a prefix (stripped as
// the mount) but not name another deployment there.
func TestResolve(t *testing.T) {
	ds := NewDomains([]string{"run.example.com"})
	cases := []struct {
		name, host, path, id, mount string
		ok                          bool
	}{
		{"host", "dep-a.run.example.com", "/api/v2/jobs", "dep-a", "", true},
		{"host with port", "dep-a.run.example.com:8443", "/api/v2/jobs", "dep-a", "", true},
		{"prefix", "127.0.0.1:8080", "/deployment/dep-b/api/v2/jobs", "dep-b", "/deployment/dep-b", true},
		{"prefix on another host", "api.example.com", "/deployment/dep-b/api/v2/jobs", "dep-b", "/deployment/dep-b", true},
		{"host and its own prefix", "dep-a.run.example.com", "/deployment/dep-a/api/v2/jobs", "dep-a", "/deployment/dep-a", true},
		{"host in capitals and its own prefix", "DEP-A.run.example.com", "/deployment/dep-a/api/v2/jobs", "dep-a", "/deployment/dep-a", true},
		{"host and another prefix", "dep-a.run.example.com", "/deployment/dep-b/api/v2/jobs", "", "", false},
		{"host and another prefix, nothing after", "dep-a.run.example.com", "/deployment/dep-b", "", "", false},
		{"host and an empty prefix", "dep-a.run.example.com", "/deployment//api/v2/jobs", "", "", false},
		{"host and a prefix in capitals", "dep-a.run.example.com", "/deployment/DEP-A/api/v2/jobs", "", "", false},
		{"host and a look-alike path", "dep-a.run.example.com", "/deploymentx/dep-b/api/v2/jobs", "dep-a", "", true},
		{"neither", "api.example.com", "/api/v2/jobs", "", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, mount, ok := ds.Resolve(c.host, c.path)
			if id != c.id || mount != c.mount || ok != c.ok {
				t.Errorf("Resolve(%q, %q) = %q %q %v; want %q %q %v", c.host, c.path, id, mount, ok, c.id, c.mount, c.ok)
			}
		})
	}
}

func code(err error) string {
	if err == nil {
		return ""
	}
	e, ok := apierr.As(err)
	if !ok {
		return "untyped: " + err.Error()
	}
	return e.Code
}

func TestAdmit(t *testing.T) {
	dep := func(state string, public bool) storage.Deployment {
		return storage.Deployment{ID: "dep-1", AccountID: "acme", Pool: "builtin", State: state, Public: public}
	}
	cases := []struct {
		name      string
		scope     Scope
		account   string
		code      string
		status    int
		retryAfer int
	}{
		{"unknown", Scope{ID: "dep-1"}, "acme", "not_found", 404, 0},
		{"another account's ready", Scope{Deployment: dep("ready", false), Found: true, PoolReady: true}, "other", "not_found", 404, 0},
		{"another account's stopped", Scope{Deployment: dep("stopped", false), Found: true}, "other", "not_found", 404, 0},
		{"another account's provisioning", Scope{Deployment: dep("provisioning", false), Found: true}, "other", "not_found", 404, 0},
		{"provisioning", Scope{Deployment: dep("provisioning", false), Found: true, PoolReady: true, RetryAfter: 7}, "acme", "deployment_not_ready", 429, 7},
		{"starting", Scope{Deployment: dep("starting", false), Found: true, PoolReady: true, RetryAfter: 3}, "acme", "deployment_not_ready", 429, 3},
		{"ready without a healthy worker", Scope{Deployment: dep("ready", false), Found: true, RetryAfter: 3}, "acme", "deployment_not_ready", 429, 3},
		{"stopped", Scope{Deployment: dep("stopped", false), Found: true, PoolReady: true}, "acme", "deployment_stopped", 422, 0},
		{"ready", Scope{Deployment: dep("ready", false), Found: true, PoolReady: true}, "acme", "", 0, 0},
		{"public, anyone", Scope{Deployment: dep("ready", true), Found: true, PoolReady: true}, "anyone", "", 0, 0},
		{"public stopped", Scope{Deployment: dep("stopped", true), Found: true, PoolReady: true}, "anyone", "deployment_stopped", 422, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.scope
			err := s.Admit(c.account)
			if code(err) != c.code {
				t.Fatalf("Admit = %v, want code %q", err, c.code)
			}
			if s.Admitted() != (c.code == "") {
				t.Errorf("Admitted = %v after %v", s.Admitted(), err)
			}
			if err == nil {
				return
			}
			e, _ := apierr.As(err)
			if e.Status != c.status || e.RetryAfter != c.retryAfer {
				t.Errorf("status %d retry %d, want %d %d", e.Status, e.RetryAfter, c.status, c.retryAfer)
			}
		})
	}
}

func TestAdmitDemoRate(t *testing.T) {
	lim := NewRateLimiter(2, time.Minute)
	clock := time.Unix(1000, 0)
	lim.now = func() time.Time { return clock }
	scope := func(ip string, submit bool) *Scope {
		return &Scope{Deployment: storage.Deployment{ID: "demo", AccountID: "demo", State: "ready", Public: true},
			Found: true, PoolReady: true, ClientIP: ip, Submit: submit, Demo: Demo{Rate: lim}}
	}
	for i := range 2 {
		if err := scope("10.0.0.1", true).Admit(""); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	err := scope("10.0.0.1", true).Admit("")
	e, ok := apierr.As(err)
	if !ok || e.Code != "rate_limited" || e.Status != 429 || e.RetryAfter != 30 {
		t.Fatalf("third submit = %v, want 429 rate_limited with Retry-After 30", err)
	}
	if err := scope("10.0.0.1", false).Admit(""); err != nil {
		t.Errorf("a read is not rate limited: %v", err)
	}
	if err := scope("10.0.0.2", true).Admit(""); err != nil {
		t.Errorf("another address has its own allowance: %v", err)
	}
	clock = clock.Add(30 * time.Second)
	if err := scope("10.0.0.1", true).Admit(""); err != nil {
		t.Errorf("after the refill: %v", err)
	}
	// A private deployment is never rate limited.
	private := scope("10.0.0.1", true)
	private.Deployment.Public = false
	if err := private.Admit("demo"); err != nil {
		t.Errorf("private deployment: %v", err)
	}
}

func TestRateLimiterForgetsIdleClients(t *testing.T) {
	lim := NewRateLimiter(1, time.Second)
	clock := time.Unix(1000, 0)
	lim.now = func() time.Time { return clock }
	for i := range 100 {
		lim.Allow(strings.Repeat("x", i))
	}
	clock = clock.Add(2 * time.Second)
	lim.Allow("fresh")
	if n := len(lim.buckets); n != 1 {
		t.Errorf("%d buckets after the idle ones refilled, want 1", n)
	}
}

func TestStateErrorIsTyped(t *testing.T) {
	for _, s := range []string{storage.DeploymentProvisioning, storage.DeploymentStarting, storage.DeploymentStopped} {
		if _, ok := apierr.As(StateError(s, true, 1)); !ok {
			t.Errorf("StateError(%s) is not an *apierr.Error", s)
		}
	}
	if err := StateError(storage.DeploymentReady, true, 1); !errors.Is(err, nil) {
		t.Errorf("ready = %v", err)
	}
}
