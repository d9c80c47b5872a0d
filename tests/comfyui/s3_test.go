package comfyui

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestStagingFromS3: with blobs in S3, a job's input is staged onto a
// ComfyUI worker from the bucket (no local file on the way) and the
// worker's output goes into the bucket, presigned and readable there.
func TestStagingFromS3(t *testing.T) {
	bucket := s3test.Bucket(t)
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	g := gateway.Start(t, configWithBlobs([]workerBlock{{URL: peer.URL}}, bucket.Caddyfile("presign 5m")), gateway.Options{})
	src := gateway.GradientPNG(t, 24)
	assetID := uploadAsset(t, g, src, "s3_input.png")
	id := submitOK(t, g, map[string]any{
		"1": node("LoadImage", map[string]any{"image": map[string]any{"__type": "core/ASSET", "info": map[string]any{"id": assetID}}}),
		"2": node("ImageInvert", map[string]any{"image": []any{"1", 0}}),
		"3": node("SaveImage", map[string]any{"filename_prefix": "s3", "images": []any{"2", 0}}),
	})
	j := gateway.WaitJob(t, g.URL, id, time.Minute, gateway.Terminal)
	if j["status"] != "succeeded" {
		t.Fatalf("job ended %v: %v", j["status"], j["error"])
	}
	if n := peer.Stats().Uploads; n != 1 {
		t.Errorf("%d inputs staged on the worker, want 1", n)
	}
	out := j["outputs"].([]any)[0].(map[string]any)
	u := out["url"].(string)
	if !strings.HasPrefix(u, bucket.Endpoint+"/"+bucket.Bucket+"/blobs/") { // an output's own key
		t.Fatalf("output url %q is not presigned on the bucket", u)
	}
	r := gateway.Do(t, http.MethodGet, u, nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET presigned output: %d %s", r.Status, r.Body)
	}
	checkInverted(t, src, r.Body)
	if keys := bucket.Keys(t, ""); len(keys) != 2 {
		t.Errorf("bucket objects %v, want the input and the output", keys)
	}
}
