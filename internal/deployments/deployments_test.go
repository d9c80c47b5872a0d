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
		{"ready without a healthy worker, a submit", Scope{Deployment: dep("ready", false), Found: true, Need: NeedWorker, RetryAfter: 3}, "acme", "deployment_not_ready", 429, 3},
		{"ready without a healthy worker, a read", Scope{Deployment: dep("ready", false), Found: true, Need: NeedStorage, RetryAfter: 3}, "acme", "", 0, 0},
		{"provisioning, a read", Scope{Deployment: dep("provisioning", false), Found: true, Need: NeedStorage, RetryAfter: 3}, "acme", "deployment_not_ready", 429, 3},
		{"stopped without a worker, a read", Scope{Deployment: dep("stopped", false), Found: true, Need: NeedStorage}, "acme", "deployment_stopped", 422, 0},
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

// TestNeedOf: at zero only a submit and a job's event stream may wait on
// a worker; every other v2 route is served from storage, and what is not
// under /api/v2 is not known to be.
func TestNeedOf(t *testing.T) {
	const id = "0b7f2c1e-5d3a-4f6b-9c8d-1e2f3a4b5c6d"
	cases := []struct {
		method, path string
		need         Need
		job          string
	}{
		{"POST", "/api/v2/jobs", NeedWorker, ""},
		{"GET", "/api/v2/jobs/" + id + "/events", NeedJobProgress, id},
		{"GET", "/api/v2/jobs", NeedStorage, ""},
		{"GET", "/api/v2/jobs/" + id, NeedStorage, ""},
		{"GET", "/api/v2/jobs/" + id + "/workflow", NeedStorage, ""},
		{"POST", "/api/v2/jobs/" + id + "/cancel", NeedStorage, ""},
		{"POST", "/api/v2/jobs/" + id + "/events", NeedStorage, ""}, // 405 from comfy_jobs
		{"POST", "/api/v2/assets", NeedStorage, ""},
		{"POST", "/api/v2/assets/from-hash", NeedStorage, ""},
		{"GET", "/api/v2/assets/" + id, NeedStorage, ""},
		{"GET", "/api/v2/assets/" + id + "/content", NeedStorage, ""},
		{"HEAD", "/api/v2/assets/by-hash/blake3:00", NeedStorage, ""},
		{"DELETE", "/api/v2/assets/" + id, NeedStorage, ""},
		{"GET", "/api/v2/jobs/", NeedStorage, ""},
		{"POST", "/prompt", NeedWorker, ""},
		{"GET", "/", NeedWorker, ""},
	}
	for _, c := range cases {
		need, job := NeedOf(c.method, c.path)
		if need != c.need || job != c.job {
			t.Errorf("NeedOf(%s %s) = %v %q, want %v %q", c.method, c.path, need, job, c.need, c.job)
		}
	}
}

func TestCanProgress(t *testing.T) {
	cases := []struct {
		status string
		live   bool
		want   bool
	}{
		{storage.JobSucceeded, false, true},
		{storage.JobFailed, false, true},
		{storage.JobCanceled, false, true},
		{storage.JobExpired, false, true},
		{storage.JobRunning, true, true}, // its worker drains: it finishes the job
		{storage.JobCanceling, true, true},
		{storage.JobRunning, false, false}, // its worker is gone
		{storage.JobCanceling, false, false},
		{storage.JobQueued, true, false}, // a draining worker takes no new job
		{storage.JobQueued, false, false},
	}
	for _, c := range cases {
		if got := CanProgress(c.status, c.live); got != c.want {
			t.Errorf("CanProgress(%s, live %v) = %v, want %v", c.status, c.live, got, c.want)
		}
	}
}

// TestAdmitAtZero: a ready deployment whose pool takes no job serves what
// storage holds and refuses, counting the demand once, only what needs a
// worker: a submit, a stream of a job that cannot progress.
func TestAdmitAtZero(t *testing.T) {
	cases := []struct {
		name     string
		need     Need
		progress bool
		lookErr  error
		code     string
		demand   int
	}{
		{"a read", NeedStorage, false, nil, "", 0},
		{"a submit", NeedWorker, false, nil, "deployment_not_ready", 1},
		{"a stream of a job that can progress", NeedJobProgress, true, nil, "", 0},
		{"a stream of a job that cannot", NeedJobProgress, false, nil, "deployment_not_ready", 1},
		{"a stream whose job cannot be read", NeedJobProgress, false, apierr.Upstream(errors.New("db down")), "upstream_error", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			demand, asked := 0, ""
			s := Scope{
				Deployment: storage.Deployment{ID: "dep-1", AccountID: "acme", Pool: "gpu", State: storage.DeploymentReady},
				Found:      true, Need: c.need, JobID: "job-1", RetryAfter: 5,
				NoWorker: func() int { demand++; return 41 },
				JobCanProgress: func(account, id string) (bool, error) {
					asked = account + "/" + id
					return c.progress, c.lookErr
				},
			}
			err := s.Admit("acme")
			if code(err) != c.code || demand != c.demand {
				t.Fatalf("Admit = %v with %d demand recorded, want %q and %d", err, demand, c.code, c.demand)
			}
			if c.need == NeedJobProgress && asked != "acme/job-1" {
				t.Errorf("the stream's job was looked up as %q", asked)
			}
			if e, ok := apierr.As(err); ok && e.Code == "deployment_not_ready" && e.RetryAfter != 41 {
				t.Errorf("Retry-After %d, want the pool's 41", e.RetryAfter)
			}
		})
	}
	// With a worker taking jobs, nothing is looked up or counted.
	s := Scope{Deployment: storage.Deployment{AccountID: "acme", State: storage.DeploymentReady}, Found: true, PoolReady: true,
		Need: NeedJobProgress, NoWorker: func() int { t.Error("demand counted with a ready pool"); return 1 },
		JobCanProgress: func(string, string) (bool, error) { t.Error("job looked up with a ready pool"); return false, nil }}
	if err := s.Admit("acme"); err != nil {
		t.Errorf("ready pool: %v", err)
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
