package integration

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestRunLogSurfaces: the run log of a job run on a deployment (built-in
// pool) is on GET /api/v2/jobs/{id} once the job ended — succeeded, failed
// or canceled — and absent everywhere else: the submit and cancel
// answers, GET before the end, list items, the stream's status events,
// the cloud and self-hosted surfaces, and a job that predates log capture.
func TestRunLogSurfaces(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := startServerless(t, b, "pool solo builtin {\n\t\t\tconcurrency 1\n\t\t}", "")
			s.create(t, "acme-1", "acme", "solo", false, "ready")
			key := s.key(t, "acme")
			c := s.byPrefix("acme-1", key)
			if r := c.upload(t, pngOf(t), "in.png"); r.Status != http.StatusCreated {
				t.Fatalf("upload: %d %s", r.Status, r.Body)
			}
			if r := c.upload(t, []byte("not an image"), "broken.png"); r.Status != http.StatusCreated {
				t.Fatalf("upload: %d %s", r.Status, r.Body)
			}

			// Absent on submit, and on GET while the job runs. Long enough
			// (it is canceled) that the cancel lands mid-run however loaded
			// the machine: with 3 blurs, it once ran every node first and
			// ended without "Processing interrupted".
			slow := c.submit(t, slowWorkflow(20))
			if slow.Status != http.StatusCreated || hasLogs(t, slow.JSON(t)) {
				t.Fatalf("submit answer: %d, logs key %v", slow.Status, hasLogs(t, slow.JSON(t)))
			}
			slowID := jobID(t, slow)
			running := c.wait(t, slowID, func(s string) bool { return s == "running" })
			if hasLogs(t, running) {
				t.Error("GET of a running job carries a run log")
			}
			// Canceled: the cancel answer has none, the GET after the end has it.
			cancelAnswer := c.do(t, http.MethodPost, "/api/v2/jobs/"+slowID+"/cancel", nil, nil)
			if cancelAnswer.Status != http.StatusOK || hasLogs(t, cancelAnswer.JSON(t)) {
				t.Errorf("cancel answer: %d %s", cancelAnswer.Status, cancelAnswer.Body)
			}
			ok := jobID(t, c.submit(t, invertWorkflow("in.png")))
			failed := jobID(t, c.submit(t, invertWorkflow("broken.png")))

			// The stream of the succeeding job: no status event carries it.
			stream := c.do(t, http.MethodGet, "/api/v2/jobs/"+ok+"/events", nil, nil)
			events, err := gateway.ParseEvents(bytes.NewReader(stream.Body), nil)
			if err != nil || len(events) == 0 || events[len(events)-1].Data["status"] != "succeeded" {
				t.Fatalf("stream: %d events, %v; %s", len(events), err, stream.Body)
			}
			for _, e := range events {
				if _, has := e.Data["logs"]; has {
					t.Errorf("a %s event carries a run log", e.Name)
				}
			}
			want := map[string][]string{
				slowID: {"got prompt\n", "Processing interrupted\n", "Prompt executed in "},
				ok:     {"got prompt\n", "executed node 3 (SaveImage)", "Prompt executed in "},
				failed: {"got prompt\n", "!!! Exception during processing !!! ", "Failed node 1 (LoadImage)", "Prompt executed in "},
			}
			for id, lines := range want {
				j := c.wait(t, id, gateway.Terminal)
				logs, has := j["logs"].(map[string]any)
				if !has {
					t.Errorf("GET of %s job: no run log in %v", j["status"], j)
					continue
				}
				text, _ := logs["text"].(string)
				if !containsAll(text, lines...) || logs["truncated"] != false {
					t.Errorf("%s job's run log = %v", j["status"], logs)
				}
				if at, err := time.Parse(time.RFC3339Nano, logs["captured_at"].(string)); err != nil || at.Before(time.Now().Add(-time.Hour)) {
					t.Errorf("captured_at %v: %v", logs["captured_at"], err)
				}
				// Cancel of a finished job answers the job, without its log.
				if r := c.do(t, http.MethodPost, "/api/v2/jobs/"+id+"/cancel", nil, nil); hasLogs(t, r.JSON(t)) {
					t.Errorf("cancel answer of a finished job carries its run log")
				}
				// The cloud surface never shows it.
				if r := (client{base: s.cloudURL, key: key}).get(t, id); r.Status != http.StatusOK || hasLogs(t, r.JSON(t)) {
					t.Errorf("cloud GET: %d logs %v", r.Status, hasLogs(t, r.JSON(t)))
				}
			}
			list := c.do(t, http.MethodGet, "/api/v2/jobs", nil, nil)
			for _, item := range list.JSON(t)["jobs"].([]any) {
				if hasLogs(t, item.(map[string]any)) {
					t.Error("a list item carries a run log")
				}
			}
			if s.dsn != "" {
				// A job that predates log capture has no log row.
				if _, err := s.store(t).Pool().Exec(context.Background(), `DELETE FROM job_logs WHERE job_id = $1`, ok); err != nil {
					t.Fatal(err)
				}
				if j := c.get(t, ok).JSON(t); hasLogs(t, j) || j["status"] != "succeeded" {
					t.Errorf("a job without a log row: %v", j)
				}
			}
		})
	}
}

// TestRunLogSelfHosted: a self-hosted gateway's jobs never carry a log.
func TestRunLogSelfHosted(t *testing.T) {
	g := startGateway(t, backends()[0])
	r := submit(t, g, map[string]any{"workflow": slowWorkflow(1)}, nil)
	id := jobID(t, response{r.Response})
	j := gateway.WaitJob(t, g.URL, id, time.Minute, gateway.Terminal)
	if j["status"] != "succeeded" || hasLogs(t, j) {
		t.Errorf("self-hosted job: %v", j)
	}
}

// TestRunLogGoneWithTheJob: once a job is past its retention (and the
// purge delay), the reaper deletes it and its run log with it.
func TestRunLogGoneWithTheJob(t *testing.T) {
	b := backends()[1]
	s := startServerless(t, b, `jobs {
			retention 10s
			purge_after 1s
			lease 1s
		}`, "")
	s.create(t, "short", "acme", "", false, "ready")
	c := s.byPrefix("short", s.key(t, "acme"))
	tiny := map[string]any{
		"1": map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}},
		"2": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "tiny", "images": []any{"1", 0}}},
	}
	id := jobID(t, c.submit(t, tiny))
	j := c.wait(t, id, gateway.Terminal)
	if !hasLogs(t, j) {
		t.Fatalf("no run log on the finished job: %v", j)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		r := c.get(t, id)
		if r.Status == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job outlived its retention: %d %s", r.Status, r.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, _, err := s.store(t).GetJobLog(context.Background(), "acme", id); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the run log outlived its job: %v", err)
	}
	if !strings.Contains(string(c.get(t, id).Body), "not_found") {
		t.Error("a deleted job does not answer not_found")
	}
}
