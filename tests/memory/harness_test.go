// Package memory measures a real gateway process's resident memory under
// hostile images and heavy workflows (issue 38): decompression bombs
// through every surface that receives images must leave the gateway within
// 100 MiB of its idle RSS, and the built-in executor must stay within its
// configured memory budget. Peaks are read from /proc/<pid>/status
// (VmHWM), reset between attacks through /proc/<pid>/clear_refs.
package memory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/bench"
	"github.com/comfygate/comfygate/tests/gateway"
)

const mib = 1 << 20

// process reads a gateway's memory from /proc.
type process struct {
	t   *testing.T
	pid int
}

// status is a field of /proc/<pid>/status, in bytes.
func (p process) status(field string) int64 {
	p.t.Helper()
	kb, err := bench.StatusKB(p.pid, field)
	if err != nil {
		p.t.Fatal(err)
	}
	return kb << 10
}

// rss is the resident set now.
func (p process) rss() int64 { return p.status("VmRSS") }

// resetPeak sets VmHWM to the current RSS (clear_refs 5, Linux 4.0+).
func (p process) resetPeak() {
	p.t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.pid), []byte("5"), 0); err != nil {
		p.t.Fatalf("resetting the peak RSS: %v", err)
	}
}

// peak is VmHWM: the most resident since the last reset.
func (p process) peak() int64 { return p.status("VmHWM") }

// idle waits until the RSS stops falling after the warm-up and returns it.
func (p process) idle() int64 {
	p.t.Helper()
	last := p.rss()
	for range 20 {
		time.Sleep(250 * time.Millisecond)
		now := p.rss()
		if now >= last-mib/2 {
			return max(now, last)
		}
		last = now
	}
	return last
}

// skipUnlessLinux: the measurement reads /proc.
func skipUnlessLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/<pid>/status")
	}
}

// envelope checks that r is the contract's error envelope with status and
// code.
func envelope(t *testing.T, what string, r gateway.Response, status int, code string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if r.Status != status || json.Unmarshal(r.Body, &e) != nil || e.Error.Code != code || e.Error.Message == "" {
		t.Errorf("%s: %d %.300s, want %d with the envelope's code %s", what, r.Status, r.Body, status, code)
	}
}

// multipartBody builds a form of fields and one file part.
func multipartBody(fields map[string]string, fileField, fileName string, data []byte) (*bytes.Buffer, string) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for k, v := range fields {
		_ = w.WriteField(k, v)
	}
	fw, _ := w.CreateFormFile(fileField, fileName)
	_, _ = fw.Write(data)
	_ = w.Close()
	return &b, w.FormDataContentType()
}

// submit posts a v2 job and returns its id.
func submit(t *testing.T, base string, graph map[string]any) gateway.Response {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"workflow": graph})
	return gateway.Do(t, http.MethodPost, base+"/api/v2/jobs", bytes.NewReader(body), map[string]string{"Content-Type": "application/json"})
}

// jobError is a finished job's status and error code.
func jobError(job map[string]any) (status, code, message string) {
	status, _ = job["status"].(string)
	if e, ok := job["error"].(map[string]any); ok {
		code, _ = e["code"].(string)
		message, _ = e["message"].(string)
	}
	return status, code, message
}

func node(class string, inputs map[string]any) map[string]any {
	return map[string]any{"class_type": class, "inputs": inputs}
}

func link(id string) []any { return []any{id, 0} }
