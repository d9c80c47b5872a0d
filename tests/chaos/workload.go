package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/zeebo/blake3"
)

// HangBound is the longest any non-streaming request may take, faults or
// not: the router's deadline, a lease and a margin. A request past it is a
// hang.
const HangBound = 25 * time.Second

// Driver runs the mixed workload against a stack's gateways.
type Driver struct {
	S *Stack
	H *History
	// Pause is each worker's pause between operations (moderate rate).
	Pause time.Duration

	client *http.Client
	mu     sync.Mutex
	jobs   []jobRef
	// assets are the assets answered 2xx (and the seeds) not yet picked
	// for a delete, and their bytes.
	assets []assetRef
}

type assetRef struct {
	id   string
	data []byte
}

type jobRef struct {
	id      string
	gateway int
}

// NewDriver returns a driver recording into h; the assets h was seeded
// with are the workload's to re-upload and delete too.
func NewDriver(s *Stack, h *History) *Driver {
	d := &Driver{S: s, H: h, Pause: 60 * time.Millisecond, client: &http.Client{
		Timeout:   HangBound + 5*time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 32, ResponseHeaderTimeout: HangBound + 5*time.Second},
	}}
	for _, seed := range h.Seeds() {
		d.assets = append(d.assets, assetRef{seed.ID, seed.Data})
	}
	return d
}

// Run drives workers concurrent clients until ctx ends.
func (d *Driver) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				d.step(ctx, w)
				select {
				case <-ctx.Done():
				case <-time.After(d.Pause):
				}
			}
		}()
	}
	wg.Wait()
	d.client.CloseIdleConnections()
}

func (d *Driver) step(ctx context.Context, w int) {
	g := mrand.IntN(len(d.S.Gateways))
	switch n := mrand.IntN(100); {
	case n < 30:
		d.Upload(ctx, g, mrand.IntN(2) == 0)
	case n < 35:
		d.Delete(ctx, g)
	case n < 55:
		d.Submit(ctx, g, mrand.IntN(10) != 0)
	case n < 72:
		d.Poll(ctx, g)
	case n < 77:
		d.Cancel(ctx, g)
	case n < 82 && w == 0:
		d.Events(ctx, g)
	default:
		d.Route(ctx, g)
	}
}

// retryable says a client would retry the same intention after this answer.
func retryable(e Entry) bool { return e.Status == 0 || e.Status >= 500 || e.Status == 429 }

// attempts runs send up to 3 times while the answer is retryable (and a
// key makes a retry safe), then, for a keyed intention that succeeded,
// sometimes once more to see the key refused.
func (d *Driver) attempts(ctx context.Context, keyed bool, send func(attempt int) Entry) {
	for a := 1; a <= 3 && ctx.Err() == nil; a++ {
		e := send(a)
		if e.OK() && keyed && mrand.IntN(10) == 0 {
			send(a + 1)
		}
		if !retryable(e) || !keyed {
			return
		}
		time.Sleep(time.Duration(200*a) * time.Millisecond)
	}
}

// Upload posts bytes as an asset, with a key (and retries) or without: new
// random bytes, or a third of the time the bytes of an earlier asset (a
// dedup, over whichever layout holds them); half of the uploads declare
// expected_hash (their bytes go to their address, the others to a key).
func (d *Driver) Upload(ctx context.Context, g int, keyed bool) {
	var data []byte
	if mrand.IntN(3) == 0 {
		d.mu.Lock()
		if n := len(d.assets); n > 0 {
			data = d.assets[mrand.IntN(n)].data
		}
		d.mu.Unlock()
	}
	if data == nil {
		data = make([]byte, 2048+mrand.IntN(30<<10))
		rand.Read(data)
	}
	declare := mrand.IntN(2) == 0
	logical := "up-" + uuid.NewString()
	d.H.Upload(logical, data)
	key := ""
	if keyed {
		key = "k-" + logical
	}
	d.attempts(ctx, keyed, func(a int) Entry {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		_ = mw.WriteField("content_type", "application/octet-stream")
		_ = mw.WriteField("file_path", logical+".bin")
		if declare {
			_ = mw.WriteField("expected_hash", hashOf(data))
		}
		part, _ := mw.CreateFormFile("file", logical+".bin")
		part.Write(data)
		mw.Close()
		hdr := map[string]string{"Content-Type": mw.FormDataContentType()}
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		e := d.do(ctx, Entry{Op: OpUpload, Gateway: g, Logical: logical, Key: key, Attempt: a},
			http.MethodPost, "/api/v2/assets", &body, hdr)
		d.H.Add(e)
		if e.OK() && e.ID != "" {
			d.mu.Lock()
			d.assets = append(d.assets, assetRef{e.ID, data})
			d.mu.Unlock()
		}
		return e
	})
}

// Delete deletes an asset answered earlier (or a seed), retrying while the
// answer is retryable (a delete is idempotent: a retry after an unknown
// outcome is a 404). When it was the last record over its bytes, their
// object goes with it.
func (d *Driver) Delete(ctx context.Context, g int) {
	d.mu.Lock()
	n := len(d.assets)
	if n == 0 {
		d.mu.Unlock()
		return
	}
	i := mrand.IntN(n)
	a := d.assets[i]
	d.assets = append(d.assets[:i], d.assets[i+1:]...)
	d.mu.Unlock()
	d.attempts(ctx, true, func(attempt int) Entry {
		e := d.do(ctx, Entry{Op: OpDelete, Gateway: g, Logical: "del-" + a.id, Attempt: attempt},
			http.MethodDelete, "/api/v2/assets/"+a.id, nil, nil)
		e.ID = a.id
		d.H.Add(e)
		return e
	})
}

// hashOf is the content address of b.
func hashOf(b []byte) string {
	sum := blake3.Sum256(b)
	return "blake3:" + hex.EncodeToString(sum[:])
}

// SubmitWorkflow is the workload's job: two 50 ms steps on a ComfyUI peer
// and a text output carrying the submission's logical name, so storage
// can be searched for it.
func SubmitWorkflow(logical string) []byte {
	wf := map[string]any{
		"1": map[string]any{"class_type": "SlowNode", "inputs": map[string]any{"steps": 2, "step_ms": 50}},
		"2": map[string]any{"class_type": "TextOutput", "inputs": map[string]any{"text": logical}},
	}
	b, _ := json.Marshal(map[string]any{"workflow": wf})
	return b
}

// Submit posts a job, retrying on the same key.
func (d *Driver) Submit(ctx context.Context, g int, keyed bool) {
	logical := "job-" + uuid.NewString()
	key := ""
	if keyed {
		key = "k-" + logical
	}
	d.attempts(ctx, keyed, func(a int) Entry {
		hdr := map[string]string{"Content-Type": "application/json"}
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		e := d.do(ctx, Entry{Op: OpSubmit, Gateway: g, Logical: logical, Key: key, Attempt: a},
			http.MethodPost, "/api/v2/jobs", bytes.NewReader(SubmitWorkflow(logical)), hdr)
		d.H.Add(e)
		if e.OK() && e.ID != "" {
			d.mu.Lock()
			d.jobs = append(d.jobs, jobRef{e.ID, g})
			d.mu.Unlock()
		}
		return e
	})
}

func (d *Driver) someJob() (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.jobs) == 0 {
		return "", false
	}
	// Recent jobs are the interesting ones.
	n := len(d.jobs)
	return d.jobs[n-1-mrand.IntN(min(n, 20))].id, true
}

// Poll reads a known job.
func (d *Driver) Poll(ctx context.Context, g int) {
	id, ok := d.someJob()
	if !ok {
		return
	}
	d.H.Add(d.do(ctx, Entry{Op: OpPoll, Gateway: g, Logical: id}, http.MethodGet, "/api/v2/jobs/"+id, nil, nil))
}

// Cancel cancels a known job.
func (d *Driver) Cancel(ctx context.Context, g int) {
	id, ok := d.someJob()
	if !ok {
		return
	}
	d.H.Add(d.do(ctx, Entry{Op: OpCancel, Gateway: g, Logical: id}, http.MethodPost, "/api/v2/jobs/"+id+"/cancel", nil, nil))
}

// Events follows a known job's event stream for at most 10 s.
func (d *Driver) Events(ctx context.Context, g int) {
	id, ok := d.someJob()
	if !ok {
		return
	}
	e := Entry{Op: OpEvents, Gateway: g, Logical: id, ID: id, Start: time.Now(), Fault: d.H.Faulty()}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, d.S.Gateways[g].URL+"/api/v2/jobs/"+id+"/events", nil)
	resp, err := d.client.Do(req)
	if err != nil {
		e.Err, e.End = err.Error(), time.Now()
		d.H.Add(e)
		return
	}
	defer resp.Body.Close()
	e.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.Code, e.Enveloped = envelope(b)
	} else {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "status":
				var m struct{ Status string }
				if json.Unmarshal([]byte(line[6:]), &m) == nil && m.Status != "" {
					e.Statuses = append(e.Statuses, m.Status)
				}
			}
		}
	}
	e.End = time.Now()
	d.H.Add(e)
}

// RoutePrompt is a router call's body for a logical call.
func RoutePrompt(logical string) []byte {
	return []byte(fmt.Sprintf(`{"prompt":%q,"seed":7}`, logical))
}

// Route calls the router's model with a key, retrying on the same key.
func (d *Driver) Route(ctx context.Context, g int) {
	logical := "call-" + uuid.NewString()
	key := "k-" + logical
	d.attempts(ctx, true, func(a int) Entry {
		e := d.do(ctx, Entry{Op: OpRoute, Gateway: g, Logical: logical, Key: key, Attempt: a},
			http.MethodPost, "/v1/models/"+RouterModel, bytes.NewReader(RoutePrompt(logical)),
			map[string]string{"Content-Type": "application/json", "Idempotency-Key": key,
				"Authorization": "Bearer " + d.S.Token})
		d.H.Add(e)
		return e
	})
}

// do sends one request to gateway e.Gateway and fills in e's answer.
func (d *Driver) do(ctx context.Context, e Entry, method, path string, body io.Reader, hdr map[string]string) Entry {
	e.Fault = d.H.Faulty()
	e.Start = time.Now()
	defer func() { e.End = time.Now() }()
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, d.S.Gateways[e.Gateway].URL+path, body)
	if err != nil {
		e.Err = err.Error()
		return e
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		e.Err = err.Error()
		e.End = time.Now()
		return e
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e.End = time.Now()
	e.Status = resp.StatusCode
	if e.Op == OpRoute {
		e.Code = resp.Header.Get("X-Service-Error-Type")
		e.Enveloped = e.Status < 400 || e.Code != ""
		return e
	}
	if e.Status >= 400 {
		e.Code, e.Enveloped = envelope(b)
		return e
	}
	var m struct{ ID, Status string }
	if json.Unmarshal(b, &m) == nil {
		e.ID, e.JobStatus = m.ID, m.Status
	}
	return e
}

// envelope returns the v2 error envelope's code and whether the body is
// a whole envelope (code, message, details).
func envelope(b []byte) (string, bool) {
	var m struct {
		Error *struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &m) != nil || m.Error == nil {
		return "", false
	}
	return m.Error.Code, m.Error.Code != "" && m.Error.Message != "" && m.Error.Details != nil
}
