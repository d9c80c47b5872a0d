package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/tests/gateway"
)

// requireBench skips unless COMFYGATE_BENCH=1.
func requireBench(t *testing.T) {
	t.Helper()
	if os.Getenv("COMFYGATE_BENCH") != "1" {
		t.Skip("benchmark: set COMFYGATE_BENCH=1 to run (see BENCHMARKS.md)")
	}
}

// modelWorkflow loads model and then runs steps×stepMS.
func modelWorkflow(model string, steps, stepMS int) map[string]any {
	return map[string]any{
		"1": gateway.Node("CheckpointLoaderSimple", map[string]any{"ckpt_name": model}),
		"2": gateway.Node("SlowNode", map[string]any{"steps": steps, "step_ms": stepMS, "model": []any{"1", 0}}),
	}
}

// submitJob posts a workflow and returns the job id; client errors fail
// the test from any goroutine (Errorf, not Fatal).
func submitJob(t *testing.T, client *http.Client, base string, wf map[string]any) (string, error) {
	raw, _ := json.Marshal(map[string]any{"workflow": wf})
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v2/jobs", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("submit: %d %v", resp.StatusCode, body)
	}
	return body["id"].(string), nil
}

// jobRecord is what the bench reads back of a finished job.
type jobRecord struct {
	Status      string  `json:"status"`
	CreatedAt   string  `json:"created_at"`
	StartedAt   *string `json:"started_at"`
	CompletedAt *string `json:"completed_at"`
}

func getJob(client *http.Client, base, id string) (jobRecord, error) {
	resp, err := client.Get(base + "/api/v2/jobs/" + id)
	if err != nil {
		return jobRecord{}, err
	}
	defer resp.Body.Close()
	var j jobRecord
	if resp.StatusCode != http.StatusOK {
		return j, fmt.Errorf("GET job %s: %d", id, resp.StatusCode)
	}
	return j, json.NewDecoder(resp.Body).Decode(&j)
}

// waitAll polls the jobs until every one is terminal (bounded by timeout)
// and returns them by id.
func waitAll(t *testing.T, client *http.Client, base string, ids []string, timeout time.Duration) map[string]jobRecord {
	t.Helper()
	done := map[string]jobRecord{}
	deadline := time.Now().Add(timeout)
	for len(done) < len(ids) {
		for _, id := range ids {
			if _, ok := done[id]; ok {
				continue
			}
			j, err := getJob(client, base, id)
			if err != nil {
				t.Fatal(err)
			}
			if gateway.Terminal(j.Status) {
				done[id] = j
			}
		}
		if len(done) < len(ids) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d jobs still not finished after %s", len(ids)-len(done), len(ids), timeout)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return done
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// percentile of sorted-in-place xs (nearest rank).
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	i := int(p/100*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
