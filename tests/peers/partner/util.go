package partner

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// mediaPrefix is where a peer serves the media its outputs point at.
const mediaPrefix = "/_media/"

// pngPixel is a valid 1×1 PNG, served for every media URL.
var pngPixel = []byte{
	0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d,
	0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
	0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00,
	0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
	0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00,
	0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
}

// serveMedia answers a media URL without auth, as partners' signed CDN URLs
// do. A URL minted under WithMediaExpiry carries its expiry (exp, Unix
// milliseconds) and answers 403 after it, as an expired signed URL does; one
// minted under WithMediaSize carries the size (size) of its bytes.
func serveMedia(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, ".png") {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	if exp, err := strconv.ParseInt(q.Get("exp"), 10, 64); err == nil && time.Now().UnixMilli() >= exp {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte("<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"))
		return
	}
	size, _ := strconv.Atoi(q.Get("size"))
	w.Header().Set("Content-Type", "image/png")
	_, _ = w.Write(MediaBytes(strings.TrimSuffix(path.Base(r.URL.Path), ".png"), size))
}

// MediaBytes are the bytes a media URL of the job id serves: a valid PNG,
// followed (when size is larger than it) by filler derived from id up to
// size bytes, so that each job's media differ.
func MediaBytes(id string, size int) []byte {
	b := append([]byte(nil), pngPixel...)
	for i := 0; len(b) < size; i++ {
		sum := sha256.Sum256([]byte(id + "/" + strconv.Itoa(i)))
		b = append(b, sum[:min(len(sum), size-len(b))]...)
	}
	return b
}

// mediaURL is the URL of the job id's media under cfg (WithMediaURL,
// WithMediaExpiry, WithMediaSize).
func (p *Peer) mediaURL(id string, cfg config) string {
	if cfg.mediaURL != "" {
		return cfg.mediaURL
	}
	u := p.URL + mediaPrefix + id + ".png"
	q := url.Values{}
	if cfg.mediaExpiry > 0 {
		q.Set("exp", strconv.FormatInt(time.Now().Add(cfg.mediaExpiry).UnixMilli(), 10))
	}
	if cfg.mediaSize > 0 {
		q.Set("size", strconv.Itoa(cfg.mediaSize))
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // peer bug: every value here is marshalable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// writeTruncated answers 200 application/json with a body that stops
// mid-value. The HTTP message itself is complete.
func writeTruncated(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"images":[{"url":"https://media.invalid/trunc`))
}

// newID returns a random UUID-shaped id, as fal and BFL use.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// input is the part of a native input a peer echoes back.
type input struct {
	prompt any
	text   any
	seed   any
}

// parseInput decodes a JSON object body. ok is false when the body is not a
// JSON object.
func parseInput(body []byte) (in input, ok bool) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return in, false
	}
	in = input{prompt: m["prompt"], text: m["text"], seed: m["seed"]}
	if in.seed == nil {
		in.seed = 42
	}
	return in, true
}

// invalidJSONDetail is the FastAPI answer to a body that is not a JSON object.
var invalidJSONDetail = []Detail{{Loc: []any{"body"}, Msg: "Input should be a valid JSON object", Type: "model_attributes_type"}}

// refusalDetail is fal's content-policy model error.
func refusalDetail(in input) []Detail {
	return []Detail{{
		Loc:   []any{"body", "prompt"},
		Msg:   "The content could not be processed because it contained material flagged by a content checker.",
		Type:  "content_policy_violation",
		Input: in.prompt,
		URL:   "https://docs.fal.ai/errors#content_policy_violation",
	}}
}

// imageOutput is the native image output the JSON and fal peers return.
func (p *Peer) imageOutput(id string, in input, cfg config) map[string]any {
	images := []any{}
	if !cfg.empty {
		img := map[string]any{"content_type": "image/png", "width": 1024, "height": 1024}
		if cfg.base64 {
			// OpenAI Images' b64_json in place of the URL.
			data := cfg.mediaData
			if data == nil {
				data = MediaBytes(id, cfg.mediaSize)
			}
			img["b64_json"] = base64.StdEncoding.EncodeToString(data)
		} else {
			img["url"] = p.mediaURL(id, cfg)
		}
		images = append(images, img)
	}
	return map[string]any{
		"images":            images,
		"seed":              in.seed,
		"prompt":            in.prompt,
		"has_nsfw_concepts": []bool{false},
		"timings":           map[string]any{"inference": 0.01},
	}
}
