package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
)

func invertWorkflow(image any) map[string]any {
	return map[string]any{
		"1": map[string]any{"class_type": "LoadImage", "inputs": map[string]any{"image": image}},
		"2": map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"1", 0}}},
		"3": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "it", "images": []any{"2", 0}}},
	}
}

// slowWorkflow keeps a worker busy with blurs of a 2048×2048 image (about
// 0.7 s of CPU each on this machine); cancellation lands between them.
func slowWorkflow(blurs int) map[string]any {
	wf := map[string]any{"1": map[string]any{"class_type": "EmptyImage",
		"inputs": map[string]any{"width": 2048, "height": 2048, "batch_size": 1, "color": 0x336699}}}
	prev := "1"
	for i := 2; i <= blurs+1; i++ {
		id := fmt.Sprint(i)
		wf[id] = map[string]any{"class_type": "ImageBlur", "inputs": map[string]any{"image": []any{prev, 0}, "blur_radius": 31, "sigma": 3}}
		prev = id
	}
	wf["900"] = map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "slow", "images": []any{prev, 0}}}
	return wf
}

func submit(t *testing.T, g *gateway.Gateway, body any, header map[string]string) response {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{"Content-Type": "application/json"}
	for k, v := range header {
		h[k] = v
	}
	return do(t, http.MethodPost, g.URL+"/api/v2/jobs", bytes.NewReader(raw), h)
}
