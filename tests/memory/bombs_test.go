package memory

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/comfygate/comfygate/tests/bombs"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// bomb is one decompression bomb, built when it is used.
type bomb struct {
	name, file string
	build      func() []byte
}

// The bombs of issue 38: a 30000×30000 gray PNG of zeros (875 KB, which
// took a gateway from 64 MiB to 921 MiB through /upload/mask), 50000×50000,
// colour, 16-bit, interlaced and JPEG.
var bombList = []bomb{
	{"30000² gray PNG", "gray30k.png", func() []byte { return bombs.PNG(30000, 30000, 0, 8, false) }},
	{"50000² gray PNG", "gray50k.png", func() []byte { return bombs.PNG(50000, 50000, 0, 8, false) }},
	{"30000² colour PNG", "rgb30k.png", func() []byte { return bombs.PNG(30000, 30000, 2, 8, false) }},
	{"30000² 16-bit gray PNG", "gray16-30k.png", func() []byte { return bombs.PNG(30000, 30000, 0, 16, false) }},
	{"30000² interlaced RGBA PNG", "adam7-30k.png", func() []byte { return bombs.PNG(30000, 30000, 6, 8, true) }},
	{"30000² gray JPEG", "gray30k.jpg", func() []byte { return bombs.JPEG(30000, 30000, 1, false) }},
	{"30000² progressive colour JPEG", "prog30k.jpg", func() []byte { return bombs.JPEG(30000, 30000, 3, true) }},
}

const consoleToken = "memory-test-console-token"

// bombSite serves, without authentication: the v2 API and the ComfyUI
// front on the built-in pool at the root, the same on a ComfyUI pool of
// one worker peer under /peer/, and the operator console under /console/.
func bombSite(peerURL string) string {
	return `{
	admin off
	grace_period 1s
	comfygate {
		storage embedded ./data
		pool peer comfyui {
			worker ` + peerURL + `
		}
	}
}
http://:{PORT} {
	bind 127.0.0.1
	handle_path /console/* {
		error_envelope
		comfy_console {
			token ` + consoleToken + `
		}
	}
	handle_path /peer/* {
		route {
			error_envelope
			comfy_auth none
			comfy_jobs peer
			comfy_native peer
			error "not found" 404
		}
	}
	route {
		error_envelope
		comfy_auth none
		idempotency
		comfy_assets
		comfy_jobs
		comfy_native
		error "not found" 404
	}
}
`
}

// TestDecodeBombs sends every bomb through every surface that receives an
// image from a client or a worker — /upload/image and v2 uploads (stored,
// never decoded), /upload/mask as original_ref and as the mask (refused
// from the headers: 422), LoadImage on the built-in executor (the job
// fails with node_execution_error), the console serving it, and a ComfyUI
// worker sending it as its previews to a v2 event stream and a ComfyUI
// socket — and measures a fresh gateway's peak RSS on each surface against
// its idle RSS: within 100 MiB. Before the bounds, the first bomb alone
// took the gateway from 64 MiB to 924 MiB through /upload/mask.
func TestDecodeBombs(t *testing.T) {
	skipUnlessLinux(t)
	t.Logf("peak RSS above idle per surface (MiB):")
	t.Logf("%-31s %7s %5s %7s %7s %7s %7s %7s %7s", "bomb", "MB", "idle", "upload", "mask", "v2", "console", "load", "preview")
	for _, b := range bombList {
		t.Run(b.name, func(t *testing.T) {
			peer := comfyuipeer.New(t, comfyuipeer.Options{})
			g := gateway.Start(t, bombSite(peer.URL), gateway.Options{})
			s := &bombSurfaces{t: t, g: g, peer: peer, proc: process{t: t, pid: g.PID()}}
			s.attack("warm.png", gateway.GradientPNG(t, 64), false) // every code path once
			idle := s.proc.idle()
			s.peaks = nil
			data := b.build()
			defer func() {
				line := fmt.Sprintf("%-31s %7.2f %5d", b.name, float64(len(data))/1e6, idle/mib)
				for _, pk := range s.peaks {
					line += fmt.Sprintf(" %+7d", (pk.peak-idle)/mib)
					if pk.peak-idle > 100*mib {
						t.Errorf("%s through %s took the gateway from %d MiB to %d MiB", b.name, pk.surface, idle/mib, pk.peak/mib)
					}
				}
				t.Log(line)
			}()
			s.attack(b.file, data, true)
		})
	}
}

// surfacePeak is the peak RSS while one surface handled a bomb.
type surfacePeak struct {
	surface string
	peak    int64
}

// bombSurfaces sends an image through every surface of bombSite.
type bombSurfaces struct {
	t     *testing.T
	g     *gateway.Gateway
	peer  *comfyuipeer.Peer
	proc  process
	peaks []surfacePeak
}

// measure runs one surface's requests between a reset of the peak RSS and
// its reading.
func (s *bombSurfaces) measure(surface string, f func()) {
	s.proc.resetPeak()
	f()
	s.peaks = append(s.peaks, surfacePeak{surface, s.proc.peak()})
}

// attack sends data (file name file) everywhere; bomb says whether it is
// one (refused where it would be decoded) or an ordinary image.
func (s *bombSurfaces) attack(file string, data []byte, bomb bool) {
	t, base := s.t, s.g.URL
	var uploaded struct{ Name string }
	s.measure("/upload/image", func() { // stores the bytes as an input
		body, ct := multipartBody(map[string]string{"overwrite": "true"}, "image", file, data)
		r := gateway.Do(t, http.MethodPost, base+"/upload/image", body, map[string]string{"Content-Type": ct})
		if r.Status != http.StatusOK {
			t.Fatalf("/upload/image %s: %d %s", file, r.Status, r.Body)
		}
		_ = json.Unmarshal(r.Body, &uploaded)
	})
	s.measure("/upload/mask", func() { // a 1×1 mask on it, and itself as the mask
		ref, _ := json.Marshal(map[string]string{"filename": uploaded.Name, "subfolder": "", "type": "input"})
		for _, mask := range [][]byte{bombs.PNG(1, 1, 6, 8, false), data} {
			body, ct := multipartBody(map[string]string{"original_ref": string(ref), "type": "input"}, "image", "mask-"+file+".png", mask)
			r := gateway.Do(t, http.MethodPost, base+"/upload/mask", body, map[string]string{"Content-Type": ct})
			if bomb {
				envelope(t, "/upload/mask of "+file, r, http.StatusUnprocessableEntity, "invalid_request")
			} else if r.Status != http.StatusOK && len(mask) == len(data) {
				t.Fatalf("/upload/mask of %s: %d %s", file, r.Status, r.Body)
			}
		}
	})
	var assetID string
	s.measure("v2 upload", func() {
		r := gateway.Upload(t, http.DefaultClient, base, data, "v2-"+file, "image/png", nil)
		if r.Status != http.StatusCreated && r.Status != http.StatusOK {
			t.Fatalf("v2 upload %s: %d %s", file, r.Status, r.Body)
		}
		assetID, _ = r.JSON(t)["id"].(string)
	})
	s.measure("the console", func() {
		r := gateway.Do(t, http.MethodGet, base+"/console/api/assets/local/"+assetID+"/content", nil,
			map[string]string{"Authorization": "Bearer " + consoleToken})
		if r.Status != http.StatusOK || len(r.Body) != len(data) {
			t.Errorf("console content of %s: %d, %d bytes of %d", file, r.Status, len(r.Body), len(data))
		}
	})
	s.measure("LoadImage", func() {
		r := submit(t, base, map[string]any{"1": node("LoadImage", map[string]any{"image": uploaded.Name}),
			"2": node("PreviewImage", map[string]any{"images": link("1")})})
		if r.Status != http.StatusCreated {
			t.Fatalf("submit LoadImage %s: %d %s", file, r.Status, r.Body)
		}
		job := gateway.WaitJob(t, base, r.JSON(t)["id"].(string), 2*time.Minute, gateway.Terminal)
		status, code, message := jobError(job)
		switch {
		case bomb && (status != "failed" || code != "node_execution_error" || !strings.Contains(message, "exceeds limit")):
			t.Errorf("LoadImage of %s: %s %s %q, want failed with node_execution_error", file, status, code, message)
		case !bomb && status != "succeeded":
			t.Fatalf("LoadImage of %s: %s %s %q", file, status, code, message)
		}
	})
	s.measure("worker previews", func() { s.previews(file, data) })
}

// previews has the worker send data as three previews of a job, read both
// as a v2 event stream and as a ComfyUI socket's binary frames.
func (s *bombSurfaces) previews(file string, data []byte) {
	t, base := s.t, s.g.URL+"/peer"
	s.peer.Set(func(sw *comfyuipeer.Switches) { sw.PreviewImage = data })
	clientID := "memory-" + file
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(base, "http", "ws", 1)+"/ws?"+url.Values{"clientId": {clientID}}.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(64 << 20)
	// The front greets a socket with its status once it has registered
	// the client id; previews sent before that are not replayed (nor are
	// they by ComfyUI), and a loaded machine once let all three pass first.
	for {
		typ, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("socket before the prompt: %v", err)
		}
		var m struct{ Type string }
		if typ == websocket.MessageText && json.Unmarshal(msg, &m) == nil && m.Type == "status" {
			break
		}
	}
	prompt, _ := json.Marshal(map[string]any{"client_id": clientID,
		"prompt": map[string]any{"1": node("PreviewNode", map[string]any{"frames": 3, "step_ms": 50})}})
	r := gateway.Do(t, http.MethodPost, base+"/prompt", strings.NewReader(string(prompt)), map[string]string{"Content-Type": "application/json"})
	if r.Status != http.StatusOK {
		t.Fatalf("/prompt: %d %s", r.Status, r.Body)
	}
	promptID, _ := r.JSON(t)["prompt_id"].(string)
	events := make(chan []gateway.SSEEvent, 1)
	go func() { events <- readEvents(t, base+"/api/v2/jobs/"+promptID+"/events") }()

	frames := 0
	for {
		typ, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("socket: %v after %d previews", err, frames)
		}
		if typ == websocket.MessageBinary {
			if len(msg) != 8+len(data) || binary.BigEndian.Uint32(msg) != 1 {
				t.Errorf("a preview frame of %d bytes, want the %d of %s after its header", len(msg), len(data), file)
			}
			frames++
			continue
		}
		var m struct {
			Type string
			Data struct {
				Node     *string
				PromptID string `json:"prompt_id"`
			}
		}
		if json.Unmarshal(msg, &m) == nil && m.Type == "executing" && m.Data.Node == nil && m.Data.PromptID == promptID {
			break
		}
	}
	previews := 0
	for _, e := range <-events {
		if e.Name == "preview" {
			b, err := base64.StdEncoding.DecodeString(fmt.Sprint(e.Data["data_base64"]))
			if err != nil || len(b) != len(data) {
				t.Errorf("a preview event of %d bytes (%v), want %d", len(b), err, len(data))
			}
			previews++
		}
	}
	if frames == 0 || previews == 0 {
		t.Errorf("%s: %d preview frames on the socket, %d preview events, want some of each", file, frames, previews)
	}
}

// readEvents reads a job's v2 event stream to its end.
func readEvents(t *testing.T, u string) []gateway.SSEEvent {
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Get(u)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer resp.Body.Close()
	events, err := gateway.ParseEvents(resp.Body, nil)
	if err != nil {
		t.Error(err)
	}
	return events
}
