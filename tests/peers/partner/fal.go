package partner

import (
	"net/http"
	"strings"
	"time"
)

// fal queue API, after https://docs.fal.ai/model-endpoints/queue:
//
//	POST /{model_id}[/{subpath}]              → 200 {request_id,response_url,status_url,cancel_url,status:"IN_QUEUE",queue_position}
//	GET  /{model_id}/requests/{id}/status     → 202 {"status":"IN_QUEUE","queue_position":0,…} on the first poll,
//	                                            202 {"status":"IN_PROGRESS",…} until done, then 200 {"status":"COMPLETED",…}
//	GET  /{model_id}/requests/{id}            → the output; 400 {"detail":"Request is still in progress"} before completion
//	PUT  /{model_id}/requests/{id}/cancel     → 202 CANCELLATION_REQUESTED | 400 ALREADY_COMPLETED | 404 NOT_FOUND
//
// model_id is the first two path segments (namespace/name). The returned URLs
// drop the subpath, as fal's do, so a client must use them rather than build
// its own. Auth is "Authorization: Key <secret>" on every call; otherwise 401.
//
// Model errors (https://fal.ai/docs/model-apis/errors) come on response_url as
// 422 {"detail":[{loc,msg,type,url,ctx?,input?}]} with X-Fal-Retryable. A
// content-policy refusal is one of them, with type "content_policy_violation".
// Request errors (https://docs.fal.ai/documentation/model-apis/request-errors)
// are flat {"detail":"…","error_type":"…"} plus X-Fal-Error-Type. A cancelled
// job's result is 499 client_cancelled; the peer assumes this because fal does
// not document it.

func (p *Peer) serveFal(w http.ResponseWriter, r *http.Request, body []byte, cfg config) {
	app, id, suffix, isRequest := splitFalPath(r.URL.Path)
	switch {
	case r.Method == http.MethodPost && !isRequest:
		p.falSubmit(w, app, body, cfg)
	case r.Method == http.MethodGet && isRequest && suffix == "status":
		p.falStatus(w, r, app, id)
	case r.Method == http.MethodGet && isRequest && suffix == "":
		p.falResult(w, app, id)
	case r.Method == http.MethodPut && isRequest && suffix == "cancel":
		p.falCancel(w, app, id)
	default:
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"detail": "Method Not Allowed"})
	}
}

// splitFalPath splits "/ns/name[/sub…]" or "/ns/name/requests/{id}[/suffix]".
func splitFalPath(path string) (app, id, suffix string, isRequest bool) {
	path = strings.Trim(path, "/")
	if i := strings.Index(path, "/requests/"); i >= 0 {
		rest := path[i+len("/requests/"):]
		id, suffix, _ = strings.Cut(rest, "/")
		return path[:i], id, suffix, true
	}
	segs := strings.SplitN(path, "/", 3)
	if len(segs) > 2 {
		segs = segs[:2]
	}
	return strings.Join(segs, "/"), "", "", false
}

func (p *Peer) falURLs(app, id string) (response, status, cancel string) {
	response = p.URL + "/" + app + "/requests/" + id
	return response, response + "/status", response + "/cancel"
}

func (p *Peer) falSubmit(w http.ResponseWriter, app string, body []byte, cfg config) {
	in, ok := parseInput(body)
	if !ok {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": invalidJSONDetail})
		return
	}
	j := p.submitJob(app, in, cfg)
	resp, status, cancel := p.falURLs(app, j.id)
	w.Header().Set("X-Fal-Request-Id", j.id)
	writeJSON(w, http.StatusOK, map[string]any{
		"status": "IN_QUEUE", "request_id": j.id, "queue_position": 0,
		"response_url": resp, "status_url": status, "cancel_url": cancel,
	})
}

// falJob finds a job by id within its model id.
func (p *Peer) falJob(app, id string) *job {
	j := p.jobs[id]
	if j == nil || j.app != app {
		return nil
	}
	return j
}

func (p *Peer) falStatus(w http.ResponseWriter, r *http.Request, app, id string) {
	p.mu.Lock()
	j := p.falJob(app, id)
	if j == nil {
		p.mu.Unlock()
		writeJSON(w, http.StatusNotFound, map[string]any{"detail": "Request not found"})
		return
	}
	state, code := "COMPLETED", http.StatusOK
	if !j.done(time.Now()) {
		state, code = "IN_PROGRESS", http.StatusAccepted
		if j.polls == 0 {
			state = "IN_QUEUE"
		}
	}
	j.polls++
	p.mu.Unlock()

	resp, status, cancel := p.falURLs(app, id)
	out := map[string]any{"status": state, "request_id": id, "response_url": resp, "status_url": status, "cancel_url": cancel}
	if state == "IN_QUEUE" {
		out["queue_position"] = 0
	}
	if r.URL.Query().Get("logs") == "1" {
		out["logs"] = []any{}
	}
	writeJSON(w, code, out)
}

func (p *Peer) falResult(w http.ResponseWriter, app, id string) {
	p.mu.Lock()
	j := p.falJob(app, id)
	if j == nil {
		p.mu.Unlock()
		writeJSON(w, http.StatusNotFound, map[string]any{"detail": "Request not found"})
		return
	}
	if !j.done(time.Now()) {
		p.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"detail": "Request is still in progress"})
		return
	}
	p.settle(j)
	cancelled, cfg, in := j.cancel, j.cfg, j.in
	p.mu.Unlock()

	switch {
	case cancelled:
		w.Header().Set("X-Fal-Error-Type", "client_cancelled")
		writeJSON(w, 499, map[string]any{"detail": "Request was cancelled", "error_type": "client_cancelled"})
	case cfg.resultStatus != 0:
		writeFalRequestError(w, cfg.resultStatus)
	case cfg.validation != nil:
		w.Header().Set("X-Fal-Retryable", "false")
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": cfg.validation})
	case cfg.refusal || cfg.outputRefusal:
		w.Header().Set("X-Fal-Retryable", "false")
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": refusalDetail(in)})
	case cfg.garbage:
		writeTruncated(w)
	default:
		w.Header().Set("X-Fal-Request-Id", id)
		writeJSON(w, http.StatusOK, p.imageOutput(id, in, cfg))
	}
}

func (p *Peer) falCancel(w http.ResponseWriter, app, id string) {
	p.mu.Lock()
	j := p.falJob(app, id)
	switch {
	case j == nil:
		p.mu.Unlock()
		writeJSON(w, http.StatusNotFound, map[string]any{"status": "NOT_FOUND"})
	case j.done(time.Now()):
		p.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"status": "ALREADY_COMPLETED"})
	default:
		j.cancel = true
		p.settle(j)
		p.mu.Unlock()
		p.cancels.Add(1)
		writeJSON(w, http.StatusAccepted, map[string]any{"status": "CANCELLATION_REQUESTED"})
	}
}

// writeFalRequestError answers code in fal's flat request-error form, with the
// error_type fal documents as typical for that status.
func writeFalRequestError(w http.ResponseWriter, code int) {
	typ := ""
	switch {
	case code == http.StatusGatewayTimeout:
		typ = "request_timeout"
	case code == http.StatusServiceUnavailable:
		typ = "runner_scheduling_failure"
	case code == http.StatusBadGateway:
		typ = "runner_incomplete_response"
	case code == http.StatusBadRequest:
		typ = "bad_request"
	case code >= 500:
		typ = "internal_error"
	}
	out := map[string]any{"detail": http.StatusText(code)}
	if typ != "" {
		out["error_type"] = typ
		w.Header().Set("X-Fal-Error-Type", typ)
	}
	writeJSON(w, code, out)
}
