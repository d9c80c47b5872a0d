package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Response is a whole HTTP response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as a JSON object, failing the test otherwise.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("status %d body %q is not a JSON object: %v", r.Status, r.Body, err)
	}
	return m
}

// Do sends one request and reads the whole response.
func Do(t testing.TB, method, url string, body io.Reader, header map[string]string) Response {
	t.Helper()
	return DoWith(t, http.DefaultClient, method, url, body, header)
}

// DoWith is Do through client.
func DoWith(t testing.TB, client *http.Client, method, url string, body io.Reader, header map[string]string) Response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// WaitJob polls GET /api/v2/jobs/{id} on base until done(status) holds,
// failing the test after timeout; it returns the job.
func WaitJob(t testing.TB, base, id string, timeout time.Duration, done func(string) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := Do(t, http.MethodGet, base+"/api/v2/jobs/"+id, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET job: %d %s", r.Status, r.Body)
		}
		j := r.JSON(t)
		if done(j["status"].(string)) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %s", id, j["status"], timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Terminal reports whether a job status is final.
func Terminal(s string) bool {
	return s == "succeeded" || s == "failed" || s == "canceled" || s == "expired"
}

// SSEEvent is one server-sent event with a JSON object as data.
type SSEEvent struct {
	Name string
	Data map[string]any
}

// ReadEvents reads a job's event stream until the server ends it or the
// timeout; every data line must be a JSON object.
func ReadEvents(t testing.TB, url string, timeout time.Duration) []SSEEvent {
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
	events, err := ParseEvents(resp.Body, nil)
	if err != nil {
		t.Fatalf("reading events: %v (got %d)", err, len(events))
	}
	return events
}

// CountEvents checks that the progress events' values never go down and
// counts the events by name.
func CountEvents(t testing.TB, events []SSEEvent) map[string]int {
	t.Helper()
	n := map[string]int{}
	last := -1.0
	for _, e := range events {
		n[e.Name]++
		if e.Name != "progress" {
			continue
		}
		v, _ := e.Data["value"].(float64)
		if v < last {
			t.Errorf("progress went back from %v to %v", last, v)
		}
		last = v
	}
	return n
}

// ParseEvents reads server-sent events from r until it ends, calling
// onEvent (if set) as each one completes. Data must be JSON objects.
func ParseEvents(r io.Reader, onEvent func(SSEEvent)) ([]SSEEvent, error) {
	var events []SSEEvent
	var cur SSEEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.Data); err != nil {
				return events, fmt.Errorf("event data is not a JSON object: %q", line)
			}
		case line == "" && cur.Name != "":
			events = append(events, cur)
			if onEvent != nil {
				onEvent(cur)
			}
			cur = SSEEvent{}
		}
	}
	return events, sc.Err()
}

// GradientPNG is a deterministic size×size RGB test image: pixel (x, y) is
// (x, y, 7x+13y) modulo 256.
func GradientPNG(t testing.TB, size int) []byte {
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

// ComfyInvert is what ComfyUI writes for an inverted 8-bit value: float32
// maths (v/255, 1-x, 255*y) and a truncating conversion on save.
func ComfyInvert(v uint8) uint8 {
	x := float32(v) / 255
	inv := 1 - x
	return uint8(math.Floor(float64(255 * inv)))
}
