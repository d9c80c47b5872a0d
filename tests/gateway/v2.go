package gateway

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/http"
	"testing"
)

// Upload posts data as an asset through client, as the contract's
// multipart body (content_type, file_path, then file), with header added
// (an Idempotency-Key, an Authorization), and returns the response.
func Upload(t testing.TB, client *http.Client, baseURL string, data []byte, filePath, contentType string, header map[string]string) Response {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	_ = w.WriteField("content_type", contentType)
	_ = w.WriteField("file_path", filePath)
	part, err := w.CreateFormFile("file", filePath)
	if err != nil {
		t.Fatal(err)
	}
	part.Write(data)
	w.Close()
	h := map[string]string{"Content-Type": w.FormDataContentType()}
	for k, v := range header {
		h[k] = v
	}
	return DoWith(t, client, http.MethodPost, baseURL+"/api/v2/assets", &body, h)
}

// Node is one node of an API-format workflow.
func Node(class string, inputs map[string]any) map[string]any {
	return map[string]any{"class_type": class, "inputs": inputs}
}

// InvertWorkflow is LoadImage(image) → ImageInvert → SaveImage(prefix), on
// any pool (the built-in executor has these nodes).
func InvertWorkflow(image, prefix string) map[string]any {
	return map[string]any{
		"1": Node("LoadImage", map[string]any{"image": image}),
		"2": Node("ImageInvert", map[string]any{"image": []any{"1", 0}}),
		"3": Node("SaveImage", map[string]any{"filename_prefix": prefix, "images": []any{"2", 0}}),
	}
}

// BlurWorkflow keeps a built-in worker slot busy with blurs of a
// 2048×2048 image (about 0.7 s of CPU each on a small machine) until it is
// canceled; cancellation lands between nodes.
func BlurWorkflow(blurs int) map[string]any {
	wf := map[string]any{"1": Node("EmptyImage", map[string]any{"width": 2048, "height": 2048, "batch_size": 1, "color": 0x336699})}
	prev := "1"
	for i := 2; i <= blurs+1; i++ {
		id := fmt.Sprint(i)
		wf[id] = Node("ImageBlur", map[string]any{"image": []any{prev, 0}, "blur_radius": 31, "sigma": 10})
		prev = id
	}
	wf["900"] = Node("SaveImage", map[string]any{"filename_prefix": "slow", "images": []any{prev, 0}})
	return wf
}
