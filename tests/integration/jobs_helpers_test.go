package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// gradientPNG is a deterministic RGB test image.
func gradientPNG(t *testing.T, size int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	for y := 0; y < size; y++ {
		for x := 0; x < size; x++ {
			img.Set(x, y, color.NRGBA{uint8(x), uint8(y), uint8(x*7 + y*13), 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// comfyInvert is what ComfyUI writes for an inverted 8-bit value: float32
// maths (v/255, 1-x, 255*y) and a truncating conversion on save.
func comfyInvert(v uint8) uint8 {
	x := float32(v) / 255
	inv := 1 - x
	return uint8(math.Floor(float64(255 * inv)))
}

func invertWorkflow(image any) map[string]any {
	return map[string]any{
		"1": map[string]any{"class_type": "LoadImage", "inputs": map[string]any{"image": image}},
		"2": map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"1", 0}}},
		"3": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "it", "images": []any{"2", 0}}},
	}
}

// slowWorkflow keeps a worker busy with blurs of a 512×512 image (roughly
// a second each on this machine); cancellation lands between them.
func slowWorkflow(blurs int) map[string]any {
	wf := map[string]any{"1": map[string]any{"class_type": "EmptyImage",
		"inputs": map[string]any{"width": 512, "height": 512, "batch_size": 1, "color": 0x336699}}}
	prev := "1"
	for i := 2; i <= blurs+1; i++ {
		id := fmt.Sprint(i)
		wf[id] = map[string]any{"class_type": "ImageBlur", "inputs": map[string]any{"image": []any{prev, 0}, "blur_radius": 15, "sigma": 3}}
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

// waitJob polls a job until done(status) or the timeout.
func waitJob(t *testing.T, g *gateway.Gateway, id string, timeout time.Duration, done func(string) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := do(t, http.MethodGet, g.URL+"/api/v2/jobs/"+id, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET job: %d %s", r.Status, r.Body)
		}
		j := r.json(t)
		if done(j["status"].(string)) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %s", id, j["status"], timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func terminal(s string) bool {
	return s == "succeeded" || s == "failed" || s == "canceled" || s == "expired"
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Name string
	Data map[string]any
}

// readEvents reads a job's event stream until it ends or the timeout.
func readEvents(t *testing.T, url string, timeout time.Duration) []sseEvent {
	t.Helper()
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var events []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.Data); err != nil {
				t.Fatalf("event data is not a JSON object: %q", line)
			}
		case line == "" && cur.Name != "":
			events = append(events, cur)
			cur = sseEvent{}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading events: %v (got %d)", err, len(events))
	}
	return events
}
