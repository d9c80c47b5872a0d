package comfyjobs

import (
	"crypto/tls"
	"encoding/json"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/storage"
)

// links returns the link builder of a request on a deployment mount.
func links(t *testing.T) httpx.Links {
	t.Helper()
	r := httptest.NewRequest("GET", "/deployment/dep-1/api/v2/jobs/whatever", nil)
	r.Host = "gw.example.com"
	r.TLS = &tls.ConnectionState{}
	return httpx.LinksFor(r)
}

// render marshals v and decodes it into a generic object.
func render(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestJobView(t *testing.T) {
	created := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	started := created.Add(1500 * time.Millisecond)
	completed := started.Add(2 * time.Second)
	now := created.Add(time.Minute)
	expires := created.Add(24 * time.Hour)
	pos := 3
	const id = "6e1f0a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
	out := storage.Output{NodeID: "9", Name: "ComfyUI_00001_.png", Type: "image", Asset: storage.Asset{
		ID: "11111111-2222-4333-8444-555555555555", Hash: "blake3:" + strings.Repeat("ab", 32),
		SizeBytes: 42, ContentType: "image/png", JobID: id,
	}}
	progress := json.RawMessage(`{"value":0.5,"nodes_done":1,"nodes_total":2}`)
	jobErr := json.RawMessage(`{"code":"node_execution_error","message":"boom","node_id":"1","class_type":"LoadImage","traceback":null}`)

	tests := []struct {
		name      string
		job       storage.Job
		pos       *int
		nullKeys  []string
		queueMS   any
		execMS    any
		outputs   int
		queuePos  any
		errorCode any
	}{
		{"queued", storage.Job{ID: id, Status: storage.JobQueued, CreatedAt: created, ExpiresAt: expires}, &pos,
			[]string{"started_at", "completed_at", "progress", "error"}, nil, nil, 0, float64(3), nil},
		{"queued with empty raw progress", storage.Job{ID: id, Status: storage.JobQueued, CreatedAt: created, ExpiresAt: expires,
			Progress: json.RawMessage{}, Error: json.RawMessage{}}, nil,
			[]string{"started_at", "completed_at", "progress", "error", "queue_position"}, nil, nil, 0, nil, nil},
		{"running", storage.Job{ID: id, Status: storage.JobRunning, CreatedAt: created, StartedAt: &started, ExpiresAt: expires,
			Progress: progress}, nil,
			[]string{"completed_at", "error", "queue_position"}, float64(1500), nil, 0, nil, nil},
		{"succeeded", storage.Job{ID: id, Status: storage.JobSucceeded, CreatedAt: created, StartedAt: &started,
			CompletedAt: &completed, ExpiresAt: expires, Progress: progress, Outputs: []storage.Output{out, out}}, nil,
			[]string{"error", "queue_position"}, float64(1500), float64(2000), 2, nil, nil},
		{"failed", storage.Job{ID: id, Status: storage.JobFailed, CreatedAt: created, StartedAt: &started,
			CompletedAt: &completed, ExpiresAt: expires, Error: jobErr}, nil,
			[]string{"progress", "queue_position"}, float64(1500), float64(2000), 0, nil, "node_execution_error"},
	}
	required := []string{"completed_at", "created_at", "error", "expires_at", "id", "metrics", "outputs",
		"progress", "queue_position", "started_at", "status", "urls"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := render(t, jobView(tt.job, tt.pos, links(t), now))
			if got := strings.Join(keys(v), ","); got != strings.Join(required, ",") {
				t.Fatalf("keys = %s, want exactly %s (no logs key)", got, strings.Join(required, ","))
			}
			for _, k := range tt.nullKeys {
				if v[k] != nil {
					t.Fatalf("%s = %v, want null", k, v[k])
				}
			}
			if v["id"] != id || v["status"] != tt.job.Status {
				t.Fatalf("id/status = %v/%v", v["id"], v["status"])
			}
			if v["created_at"] != "2025-03-01T10:00:00Z" || v["expires_at"] != "2025-03-02T10:00:00Z" {
				t.Fatalf("timestamps %v %v", v["created_at"], v["expires_at"])
			}
			if tt.job.StartedAt != nil && v["started_at"] != "2025-03-01T10:00:01.5Z" {
				t.Fatalf("started_at = %v", v["started_at"])
			}
			if v["queue_position"] != tt.queuePos {
				t.Fatalf("queue_position = %v, want %v", v["queue_position"], tt.queuePos)
			}
			m, ok := v["metrics"].(map[string]any)
			if !ok || strings.Join(keys(m), ",") != "execution_ms,queue_ms" {
				t.Fatalf("metrics = %v", v["metrics"])
			}
			if m["queue_ms"] != tt.queueMS || m["execution_ms"] != tt.execMS {
				t.Fatalf("metrics = %v, want queue_ms %v execution_ms %v", m, tt.queueMS, tt.execMS)
			}
			outs, ok := v["outputs"].([]any)
			if !ok || len(outs) != tt.outputs {
				t.Fatalf("outputs = %#v, want an array of %d", v["outputs"], tt.outputs)
			}
			if tt.errorCode != nil {
				e, _ := v["error"].(map[string]any)
				if e["code"] != tt.errorCode {
					t.Fatalf("error = %v", v["error"])
				}
			}
			if len(tt.job.Progress) > 0 {
				p, _ := v["progress"].(map[string]any)
				if p["value"] != 0.5 {
					t.Fatalf("progress = %v", v["progress"])
				}
			}
			urls, _ := v["urls"].(map[string]any)
			self := "https://gw.example.com/deployment/dep-1/api/v2/jobs/" + id
			if urls["self"] != self || urls["events"] != self+"/events" || urls["cancel"] != self+"/cancel" || len(urls) != 3 {
				t.Fatalf("urls = %v", urls)
			}
		})
	}
}

func TestJobViewOutputsNeverNull(t *testing.T) {
	b, err := json.Marshal(jobView(storage.Job{ID: "x", Status: storage.JobQueued}, nil, links(t), time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"outputs":[]`) {
		t.Fatalf("outputs is not an empty array: %s", b)
	}
}

func TestOutputView(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	hash := "blake3:" + strings.Repeat("0f", 32)
	tests := []struct {
		name string
		hash string
		want any
	}{
		{"with hash", hash, hash},
		{"hash not yet known", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := storage.Output{NodeID: "3", Name: "inv_00001_.png", Type: "image", Asset: storage.Asset{
				ID: "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", Hash: tt.hash, SizeBytes: 1234, ContentType: "image/png",
			}}
			v := render(t, outputView(o, "job-1", links(t), now))
			want := "content_type,hash,id,job_id,name,node_id,size_bytes,type,url,url_expires_at"
			if got := strings.Join(keys(v), ","); got != want {
				t.Fatalf("keys = %s, want %s", got, want)
			}
			if v["hash"] != tt.want {
				t.Fatalf("hash = %v, want %v", v["hash"], tt.want)
			}
			checks := map[string]any{
				"node_id": "3", "name": "inv_00001_.png", "type": "image", "content_type": "image/png",
				"size_bytes": float64(1234), "id": o.Asset.ID, "job_id": "job-1",
				"url":            "https://gw.example.com/deployment/dep-1/api/v2/assets/" + o.Asset.ID + "/content",
				"url_expires_at": "2025-03-01T13:00:00Z",
			}
			for k, w := range checks {
				if v[k] != w {
					t.Errorf("%s = %v, want %v", k, v[k], w)
				}
			}
		})
	}
}

// A priced job carries cost {credits, reserved}: credits null until it is
// settled; a job of a free pool has no cost member at all.
func TestJobViewCost(t *testing.T) {
	charged := int64(7)
	tests := []struct {
		name    string
		credits *storage.JobCredits
		want    string
	}{
		{"free pool", nil, ""},
		{"reserved", &storage.JobCredits{PerJob: 5, Reserved: 40}, `{"credits":null,"reserved":40}`},
		{"settled", &storage.JobCredits{PerJob: 5, Reserved: 40, Charged: &charged}, `{"credits":7,"reserved":40}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(jobView(storage.Job{ID: "x", Status: storage.JobQueued, Credits: tt.credits}, nil, links(t), time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]json.RawMessage
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			cost, ok := v["cost"]
			if tt.want == "" {
				if ok {
					t.Fatalf("cost = %s, want no member", cost)
				}
				return
			}
			if string(cost) != tt.want {
				t.Fatalf("cost = %s, want %s", cost, tt.want)
			}
		})
	}
}
