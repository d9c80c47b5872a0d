package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestHeadReadsWhatGetReads: every JSON resource read with GET is read with
// HEAD too (RFC 9110 §9.1: a general-purpose server supports HEAD): the
// same status and headers, no body. It answered 405 before, except on
// asset content.
func TestHeadReadsWhatGetReads(t *testing.T) {
	t.Parallel()
	g := startGateway(t, backends()[0])
	up := upload(t, g, nil, uploadParts(gateway.GradientPNG(t, 8), "head.png")...)
	if up.Status != http.StatusCreated {
		t.Fatalf("upload: %d %s", up.Status, up.Body)
	}
	asset := up.JSON(t)["id"].(string)
	r := submit(t, g, map[string]any{"workflow": invertWorkflow("head.png")}, nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	job := r.JSON(t)["id"].(string)
	gateway.WaitJob(t, g.URL, job, 60*time.Second, gateway.Terminal)
	for _, path := range []string{
		"/api/v2/jobs", "/api/v2/jobs/" + job, "/api/v2/jobs/" + job + "/workflow",
		"/api/v2/assets/" + asset, "/api/v2/assets/" + asset + "/content",
	} {
		get := do(t, http.MethodGet, g.URL+path, nil, nil)
		head := do(t, http.MethodHead, g.URL+path, nil, nil)
		if head.Status != get.Status || head.Status != http.StatusOK || len(head.Body) != 0 {
			t.Errorf("HEAD %s: %d with %d bytes; GET %d", path, head.Status, len(head.Body), get.Status)
		}
		if hc, gc := head.Header.Get("Content-Type"), get.Header.Get("Content-Type"); hc != gc {
			t.Errorf("HEAD %s: Content-Type %q, GET's %q", path, hc, gc)
		}
	}
	// UUIDs compare without regard to case (RFC 9562): an id in capitals
	// names the same job and asset (it answered 404).
	for _, path := range []string{"/api/v2/jobs/" + strings.ToUpper(job), "/api/v2/assets/" + strings.ToUpper(asset) + "/content"} {
		if a := do(t, http.MethodGet, g.URL+path, nil, nil); a.Status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, a.Status, a.Body)
		}
	}
	if a := do(t, http.MethodHead, g.URL+"/api/v2/jobs/"+job+"/cancel", nil, nil); a.Status != http.StatusMethodNotAllowed {
		t.Errorf("HEAD of the cancel route: %d, want 405", a.Status)
	}
}
