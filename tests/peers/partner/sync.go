package partner

import (
	"net/http"
	"strconv"
)

// Sync peers: one POST, one answer.
//
// JSON (fal.run / OpenAI Images): 200 native output; 422 {"detail":[…]} for
// validation; a refusal is OpenAI's 400
// {"error":{"code":"content_policy_violation","type":"invalid_request_error",…}}
// (DALL·E's code; fal.run would send fal's 422 form, which the fal queue peer
// covers).
//
// Bytes (ElevenLabs text-to-speech): 200 audio/mpeg; validation is FastAPI's
// 422; errors are {"detail":{"status","message"}}. ElevenLabs documents no
// content-policy code, so the refusal is 400 with
// detail.status "content_policy_violation" in its documented error shape.

// audioPrefix starts every sync-bytes answer: an ID3v2 tag header.
var audioPrefix = []byte("ID3\x04\x00\x00\x00\x00\x00\x00")

func (p *Peer) serveSync(w http.ResponseWriter, r *http.Request, body []byte, cfg config) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"detail": "Method Not Allowed"})
		return
	}
	p.submissions.Add(1)
	p.enter()
	defer p.leave()

	in, ok := parseInput(body)
	if !ok {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": invalidJSONDetail})
		return
	}
	if !p.sleep(r, cfg.latency) {
		panic(http.ErrAbortHandler)
	}
	switch {
	case cfg.resultStatus != 0:
		p.writeStatus(w, cfg.resultStatus)
	case cfg.validation != nil:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": cfg.validation})
	case cfg.refusal || cfg.outputRefusal:
		p.writeSyncRefusal(w)
	case cfg.garbage:
		p.writeSyncGarbage(w)
	case p.Kind == KindSyncBytes:
		w.Header().Set("Content-Type", "audio/mpeg")
		if cfg.empty {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusOK)
			return
		}
		text, _ := in.text.(string)
		out := append(append([]byte(nil), audioPrefix...), text...)
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		_, _ = w.Write(out)
	default:
		writeJSON(w, http.StatusOK, p.imageOutput(newID(), in, cfg))
	}
}

func (p *Peer) writeSyncRefusal(w http.ResponseWriter) {
	if p.Kind == KindSyncBytes {
		writeJSON(w, http.StatusBadRequest, map[string]any{"detail": map[string]any{
			"status": "content_policy_violation", "message": "The text violates our content policy."}})
		return
	}
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
		"code":    "content_policy_violation",
		"message": "Your request was rejected as a result of our safety system.",
		"param":   nil,
		"type":    "invalid_request_error",
	}})
}

// writeSyncGarbage sends truncated JSON, or for bytes a declared length that
// is never delivered: the connection is dropped mid-body.
func (p *Peer) writeSyncGarbage(w http.ResponseWriter) {
	if p.Kind != KindSyncBytes {
		writeTruncated(w)
		return
	}
	w.Header().Set("Content-Type", "audio/mpeg")
	w.Header().Set("Content-Length", "4096")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(audioPrefix)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	panic(http.ErrAbortHandler)
}

// ConstantBody is what a constant peer answers: about 100 bytes of native
// JSON output.
var ConstantBody = []byte(`{"images":[{"url":"https://media.invalid/c.png","content_type":"image/png"}],"seed":42,"ok":true}`)

var (
	constantType   = []string{"application/json"}
	constantLength = []string{strconv.Itoa(len(ConstantBody))}
)

// serveConstant answers at once with ConstantBody. It only keeps the
// counters, and it reads the request headers only when auth is configured.
func (p *Peer) serveConstant(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	p.submissions.Add(1)
	p.enter()
	defer p.leave()
	auth := p.constAuth.Load()
	if auth[0] != "" && r.Header.Get(auth[0]) != auth[1] {
		p.writeUnauthorized(w)
		return
	}
	hdr := w.Header()
	hdr["Content-Type"] = constantType
	hdr["Content-Length"] = constantLength
	_, _ = w.Write(ConstantBody)
}
