package chaos

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// hostileRSSBound is the gateway's resident set the sweep must stay under.
const hostileRSSBound = 400 << 20

// hostileMaxStreams is the per-account stream cap of the sweep's gateway.
const hostileMaxStreams = 16

// hostileGateway is a gateway on Postgres+Redis with file-system blobs,
// a ComfyUI peer, v2 without auth and the router behind RS256 JWTs.
func hostileGateway(t *testing.T) (*gateway.Gateway, *rsa.PrivateKey, []byte) {
	t.Helper()
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	pubPath := filepath.Join(dir, "jwt.pub")
	catalog := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(pubPath, pubPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	writeCatalog(t, catalog, "http://127.0.0.1:9")
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	cfg := `{
	admin off
	grace_period 1s
	servers {
		timeouts {
			read_header 5s
		}
	}
	comfygate {
		storage postgres "` + pgtest.DSN(t) + `"
		redis "` + pgtest.RedisURL(t) + `"
		blobs file_system ./data/blobs
		max_upload_size 4MiB
		jobs {
			max_streams ` + fmt.Sprint(hostileMaxStreams) + `
		}
		pool gpu comfyui {
			worker ` + peer.URL + `
		}
	}
}
http://:{PORT} {
	bind 127.0.0.1
	@router path /v1/models /v1/models/*
	route @router {
		error_envelope router
		comfy_auth jwt {
			key RS256 pem_file ` + pubPath + `
		}
		model_router {
			catalog ` + catalog + `
			public_base https://router.test
			allow_insecure_upstreams
			redis_prefix ` + pgtest.KeyPrefix(t) + `
		}
	}
	route {
		error_envelope
		comfy_auth none {
			min_body_rate 1KiB ` + slowlorisGrace.String() + `
		}
		idempotency
		comfy_assets
		comfy_jobs gpu
		error "not found" 404
	}
}
`
	return gateway.Start(t, cfg, gateway.Options{Dir: dir}), key, pubPEM
}

// multipartRaw builds a multipart body by hand (boundary "B").
func multipartRaw(parts ...string) []byte {
	var b bytes.Buffer
	for _, p := range parts {
		b.WriteString("--B\r\n" + p + "\r\n")
	}
	b.WriteString("--B--\r\n")
	return b.Bytes()
}

func field(name, value string) string {
	return fmt.Sprintf("Content-Disposition: form-data; name=%q\r\n\r\n%s", name, value)
}

func filePart(data string) string {
	return "Content-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n" + data
}

// hostileCase is one hostile request and the contract's answer to it.
type hostileCase struct {
	name string
	// send makes the request and returns the status and the error code
	// (v2 envelope or X-Service-Error-Type), status 0 when the gateway
	// closed the connection without an answer.
	send       func(t *testing.T, base string) (int, string)
	wantStatus []int
	wantCode   string
}

func sendRaw(t *testing.T, method, url string, body []byte, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Logf("%s %s: %v", method, url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if c := resp.Header.Get("X-Service-Error-Type"); c != "" {
		return resp.StatusCode, c
	}
	code, _ := envelope(b)
	return resp.StatusCode, code
}

func upload(body []byte) func(t *testing.T, base string) (int, string) {
	return func(t *testing.T, base string) (int, string) {
		return sendRaw(t, http.MethodPost, base+"/api/v2/assets", body, map[string]string{"Content-Type": "multipart/form-data; boundary=B"})
	}
}

func submitBody(body []byte) func(t *testing.T, base string) (int, string) {
	return func(t *testing.T, base string) (int, string) {
		return sendRaw(t, http.MethodPost, base+"/api/v2/jobs", body, map[string]string{"Content-Type": "application/json"})
	}
}

func routerWith(token string) func(t *testing.T, base string) (int, string) {
	return func(t *testing.T, base string) (int, string) {
		return sendRaw(t, http.MethodPost, base+"/v1/models/"+RouterModel, RoutePrompt("x"),
			map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + token})
	}
}

// workflowOf marshals a submit body around a workflow.
func workflowOf(wf any) []byte {
	b, _ := json.Marshal(map[string]any{"workflow": wf})
	return b
}

// nestedWorkflow is a workflow whose one input nests depth JSON arrays.
func nestedWorkflow(depth int) []byte {
	return []byte(`{"workflow":{"1":{"class_type":"TextOutput","inputs":{"text":` +
		strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}}}`)
}

// wideWorkflow is a workflow of n SlowNodes feeding one output each.
func wideWorkflow(n int) []byte {
	wf := map[string]any{}
	for i := range n {
		wf[fmt.Sprint(i+1)] = map[string]any{"class_type": "SlowNode", "inputs": map[string]any{"steps": 1, "step_ms": 1}}
	}
	return workflowOf(wf)
}

// chainWorkflow is n LoadImage→ImageInvert links deep: a long chain.
func chainWorkflow(n int) []byte {
	wf := map[string]any{"0": map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}}}
	for i := 1; i <= n; i++ {
		wf[fmt.Sprint(i)] = map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{fmt.Sprint(i - 1), 0}}}
	}
	return workflowOf(wf)
}

func hostileCases(key *rsa.PrivateKey, pubPEM []byte) []hostileCase {
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"workspace_id": "ws-x", "exp": time.Now().Add(time.Hour).Unix()}).
		SignedString(jwt.UnsafeAllowNoneSignatureType)
	hsPub, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"workspace_id": "ws-x", "exp": time.Now().Add(time.Hour).Unix()}).
		SignedString(pubPEM)
	good, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"workspace_id": "ws-x", "exp": time.Now().Add(time.Hour).Unix()}).
		SignedString(key)
	manyParts := make([]string, 0, 10002)
	manyParts = append(manyParts, field("content_type", "text/plain"), field("file_path", "a.txt"))
	for i := range 10000 {
		manyParts = append(manyParts, field(fmt.Sprintf("tag%d", i), "x"))
	}
	return []hostileCase{
		{name: "multipart without boundary", send: func(t *testing.T, base string) (int, string) {
			return sendRaw(t, http.MethodPost, base+"/api/v2/assets", multipartRaw(filePart("x")), map[string]string{"Content-Type": "multipart/form-data"})
		}, wantStatus: []int{400}, wantCode: "invalid_request"},
		{name: "multipart with 10,000 parts", send: upload(multipartRaw(append(manyParts, filePart("x"))...)), wantStatus: []int{422}, wantCode: "invalid_request"},
		{name: "multipart part header of 1 MiB", send: upload(multipartRaw(
			"X-Junk: "+strings.Repeat("a", 1<<20)+"\r\n"+field("content_type", "text/plain"), field("file_path", "a.txt"), filePart("x"))),
			// Go's multipart reader bounds part headers (10 MiB in all) and the
			// request is bounded by max_upload_size: a 1 MiB header on a
			// metadata part is read and the upload is stored.
			wantStatus: []int{201}},
		{name: "multipart repeated field", send: upload(multipartRaw(field("content_type", "text/plain"), field("content_type", "image/png"),
			field("file_path", "a.txt"), filePart("x"))), wantStatus: []int{422}, wantCode: "invalid_request"},
		{name: "request headers of 1 MiB", send: func(t *testing.T, base string) (int, string) {
			return sendRaw(t, http.MethodGet, base+"/api/v2/jobs", nil, map[string]string{"X-Junk": strings.Repeat("a", 1<<20)})
		}, wantStatus: []int{431}},
		{name: "Range with 1,000 ranges", send: func(t *testing.T, base string) (int, string) {
			var body bytes.Buffer
			data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
			body.Write(multipartRaw(field("content_type", "application/octet-stream"), field("file_path", "r.bin"), filePart(string(data))))
			r := gateway.Do(t, http.MethodPost, base+"/api/v2/assets", &body, map[string]string{"Content-Type": "multipart/form-data; boundary=B"})
			if r.Status != 201 && r.Status != 200 {
				return r.Status, "upload failed"
			}
			id, _ := r.JSON(t)["id"].(string)
			var ranges []string
			for i := range 1000 {
				ranges = append(ranges, fmt.Sprintf("%d-%d", i*50, i*50+10))
			}
			return sendRaw(t, http.MethodGet, base+"/api/v2/assets/"+id+"/content", nil, map[string]string{"Range": "bytes=" + strings.Join(ranges, ",")})
		}, wantStatus: []int{200, 206, 416}},
		{name: "Idempotency-Key of 10 KiB", send: func(t *testing.T, base string) (int, string) {
			return sendRaw(t, http.MethodPost, base+"/api/v2/jobs", SubmitWorkflow("x"),
				map[string]string{"Content-Type": "application/json", "Idempotency-Key": strings.Repeat("k", 10<<10)})
		}, wantStatus: []int{400}, wantCode: "invalid_request"},
		{name: "workflow bomb: 100,000 nodes", send: submitBody(wideWorkflow(100000)), wantStatus: []int{413, 422}},
		{name: "workflow bomb: 10,000-deep chain", send: submitBody(chainWorkflow(10000)), wantStatus: []int{422}, wantCode: "invalid_workflow"},
		{name: "workflow bomb: 100,000-deep JSON nesting", send: submitBody(nestedWorkflow(100000)), wantStatus: []int{400, 413, 422}},
		{name: "workflow bomb: 8 MiB string", send: submitBody(workflowOf(map[string]any{"1": map[string]any{"class_type": "TextOutput",
			"inputs": map[string]any{"text": strings.Repeat("a", 8<<20)}}})), wantStatus: []int{413, 422}},
		{name: "smuggled request behind Transfer-Encoding and Content-Length", send: smuggle, wantStatus: []int{400, 415, 422}},
		{name: "JWT alg none", send: routerWith(none), wantStatus: []int{401}, wantCode: "unauthorized"},
		{name: "JWT HS256 signed with the RS256 public key", send: routerWith(hsPub), wantStatus: []int{401}, wantCode: "unauthorized"},
		{name: "JWT RS256 control (accepted, upstream unreachable)", send: routerWith(good), wantStatus: []int{502, 503, 504}},
	}
}

// TestHostileInputs sends each hostile request to a real gateway and
// checks the contract's answer, then 1,000 idle event streams from one
// account and slowloris bodies, with the gateway's RSS sampled throughout
// and bounded by hostileRSSBound.
func TestHostileInputs(t *testing.T) {
	sideBySide(t)
	g, key, pubPEM := hostileGateway(t)
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if r := rss(g.PID()); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	for _, c := range hostileCases(key, pubPEM) {
		t.Run(c.name, func(t *testing.T) {
			status, code := c.send(t, g.URL)
			t.Logf("answered %d %s", status, code)
			ok := false
			for _, w := range c.wantStatus {
				ok = ok || status == w
			}
			if !ok || (c.wantCode != "" && code != c.wantCode) {
				t.Errorf("got %d %q, want one of %v %q", status, code, c.wantStatus, c.wantCode)
			}
		})
	}
	t.Run("1,000 idle event streams from one account", func(t *testing.T) { idleStreams(t, g) })
	t.Run("slowloris bodies", func(t *testing.T) { slowloris(t, g) })
	close(stop)
	wg.Wait()
	t.Logf("peak RSS during the sweep: %d MiB (bound %d MiB)", peak.Load()>>20, hostileRSSBound>>20)
	if peak.Load() == 0 || peak.Load() > hostileRSSBound {
		t.Errorf("peak RSS %d MiB, bound %d MiB", peak.Load()>>20, hostileRSSBound>>20)
	}
	// The gateway still serves.
	if st, _ := sendRaw(t, http.MethodGet, g.URL+"/api/v2/jobs?limit=1", nil, nil); st != 200 {
		t.Errorf("after the sweep: GET jobs %d", st)
	}
}

// idleStreams opens 1,000 event streams on one running job: the first
// hostileMaxStreams are served, every other one is 429 too_many_streams
// with Retry-After.
func idleStreams(t *testing.T, g *gateway.Gateway) {
	body, _ := json.Marshal(map[string]any{"workflow": map[string]any{
		"1": map[string]any{"class_type": "SlowNode", "inputs": map[string]any{"steps": 120, "step_ms": 1000}},
		"2": map[string]any{"class_type": "TextOutput", "inputs": map[string]any{"text": "idle"}}}})
	r := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs", bytes.NewReader(body), map[string]string{"Content-Type": "application/json"})
	if r.Status != 201 {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	defer gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+id+"/cancel", nil, nil)
	var mu sync.Mutex
	counts := map[string]int{}
	var conns []net.Conn
	var wg sync.WaitGroup
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(g.URL, "http://"), 10*time.Second)
			if err != nil {
				mu.Lock()
				counts["dial error"]++
				mu.Unlock()
				return
			}
			fmt.Fprintf(c, "GET /api/v2/jobs/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", id)
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			buf := make([]byte, 512)
			n, _ := io.ReadAtLeast(c, buf, 12)
			line := string(buf[:n])
			status := "none"
			if len(line) >= 12 {
				status = line[9:12]
			}
			if status == "429" && !strings.Contains(line, "Retry-After") {
				status = "429 without Retry-After"
			}
			mu.Lock()
			counts[status]++
			conns = append(conns, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("1,000 streams: %v", counts)
	for _, c := range conns {
		c.Close()
	}
	if counts["200"] != hostileMaxStreams || counts["429"] != 1000-hostileMaxStreams {
		t.Errorf("streams answered %v, want %d × 200 and %d × 429 with Retry-After", counts, hostileMaxStreams, 1000-hostileMaxStreams)
	}
}

// slowloris trickles 20 upload bodies one byte every 200 ms (5 B/s): each
// must be cut by comfy_auth's min_body_rate (1 KiB/s after its grace) with
// 408 request_timeout in the envelope, not held open for as long as the
// client keeps trickling (Caddy's own read_body is not set: it would cut
// large uploads over slow links too).
func slowloris(t *testing.T, g *gateway.Gateway) {
	body := multipartRaw(field("content_type", "text/plain"), field("file_path", "s.txt"), filePart(strings.Repeat("s", 4096)))
	var wg sync.WaitGroup
	var held atomic.Int64
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /api/v2/assets HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=B\r\nContent-Length: %d\r\n\r\n", len(body))
			answer := make(chan *http.Response, 1)
			go func() {
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					answer <- nil
					return
				}
				answer <- resp
			}()
			deadline := time.After(slowlorisGrace + 5*time.Second)
			for i := 0; i < len(body); i++ {
				select {
				case resp := <-answer:
					if resp == nil {
						t.Error("a trickled body's connection ended without an answer")
						return
					}
					defer resp.Body.Close()
					raw, _ := io.ReadAll(resp.Body)
					if code, _ := envelope(raw); resp.StatusCode != http.StatusRequestTimeout || code != "request_timeout" {
						t.Errorf("a trickled body was answered %d %s, want 408 request_timeout", resp.StatusCode, raw)
					}
					return
				case <-deadline:
					held.Add(1)
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := c.Write(body[i : i+1]); err != nil {
					t.Errorf("a trickled body was cut without an answer: %v", err)
					return
				}
			}
			t.Error("a trickled body was read whole")
		}()
	}
	wg.Wait()
	if n := held.Load(); n > 0 {
		t.Errorf("%d of 20 trickled bodies were still being read %s after they started (grace %s)", n, slowlorisGrace+5*time.Second, slowlorisGrace)
	}
}

// slowlorisGrace is the sweep's min_body_rate grace (the default is 30s).
const slowlorisGrace = 3 * time.Second

// smuggle sends a POST framed both by Transfer-Encoding (an empty chunked
// body) and by Content-Length, then a GET on the same connection: the GET
// is what a proxy framing by Content-Length would not have seen as a
// request. The gateway answers the POST and closes the connection; an
// answer to the GET is reported as status 0, code "smuggled".
func smuggle(t *testing.T, base string) (int, string) {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	c, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "POST /api/v2/jobs HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\n" +
		"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
		"GET /api/v2/jobs HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the POST: %v", err)
	}
	b, _ := io.ReadAll(first.Body)
	first.Body.Close()
	if second, err := http.ReadResponse(br, nil); err == nil {
		second.Body.Close()
		return 0, "smuggled"
	}
	code, _ := envelope(b)
	return first.StatusCode, code
}
