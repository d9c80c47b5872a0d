package gateway

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/comfygate/comfygate/internal/comfyui"
)

// AdminWorkers returns a comfyui pool's workers by URL, as GET
// /comfygate/workers/<pool> on the admin endpoint admin (a base URL)
// lists them.
func AdminWorkers(t testing.TB, admin, pool string) map[string]comfyui.WorkerState {
	t.Helper()
	resp, err := http.Get(admin + "/comfygate/workers/" + pool)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Workers []comfyui.WorkerState }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		t.Fatalf("GET workers: %d", resp.StatusCode)
	}
	m := map[string]comfyui.WorkerState{}
	for _, w := range body.Workers {
		m[w.URL] = w
	}
	return m
}
