package partner

import (
	"net/http"
	"strings"
	"time"
)

// Black Forest Labs API, after https://docs.bfl.ai/quick_start/generating_images
// and https://docs.bfl.ai/api_integration/errors:
//
//	POST /v1/{model}            x-key → 200 {"id","polling_url"}; 422 {"detail":[…]} on a bad body
//	GET  /v1/get_result?id={id} x-key → 200 {"id","status","result","progress"}
//
// The statuses are Pending, then Ready with result
// {"sample":url,"prompt","seed","start_time","end_time","duration"}. The
// others are "Request Moderated" (input refused; appears on the first poll),
// "Content Moderated" (output refused once the work is done), both with
// result null and details {"Moderation Reasons":[…]}, "Error", and "Task not
// found" for an unknown id. BFL states these in the body with HTTP 200. HTTP
// errors (WithStatus) are {"detail":"…"}: 402 is insufficient credits, 429
// is over the concurrency limit. A missing or wrong x-key is 403. BFL has no
// cancel endpoint.

func (p *Peer) serveBFL(w http.ResponseWriter, r *http.Request, body []byte, cfg config) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/get_result":
		p.bflPoll(w, r.URL.Query().Get("id"))
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/") && len(r.URL.Path) > len("/v1/"):
		p.bflSubmit(w, body, cfg)
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"detail": "Not Found"})
	}
}

func (p *Peer) bflSubmit(w http.ResponseWriter, body []byte, cfg config) {
	in, ok := parseInput(body)
	if !ok {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": invalidJSONDetail})
		return
	}
	if cfg.validation != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": cfg.validation})
		return
	}
	j := p.submitJob("", in, cfg)
	writeJSON(w, http.StatusOK, map[string]any{
		"id": j.id, "polling_url": p.URL + "/v1/get_result?id=" + j.id,
	})
}

func (p *Peer) bflPoll(w http.ResponseWriter, id string) {
	p.mu.Lock()
	j := p.jobs[id]
	if j == nil {
		p.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "status": "Task not found", "result": nil})
		return
	}
	j.polls++
	cfg, in := j.cfg, j.in
	// An input refusal is known before any work, so it is terminal at once.
	done := cfg.refusal || j.done(time.Now())
	if done {
		p.settle(j)
	}
	p.mu.Unlock()

	out := map[string]any{"id": id, "result": nil, "progress": nil}
	switch {
	case cfg.refusal:
		out["status"] = "Request Moderated"
		out["details"] = map[string]any{"Moderation Reasons": []string{"Derivative Works Filter"}}
	case !done:
		out["status"] = "Pending"
	case cfg.outputRefusal:
		out["status"] = "Content Moderated"
		out["details"] = map[string]any{"Moderation Reasons": []string{"Content Moderation Filter"}}
	case cfg.resultStatus != 0:
		out["status"] = "Error"
		out["details"] = map[string]any{"error": http.StatusText(cfg.resultStatus)}
	case cfg.garbage:
		writeTruncated(w)
		return
	default:
		res := map[string]any{"prompt": in.prompt, "seed": in.seed, "duration": 0.01}
		if !cfg.empty {
			res["sample"] = p.mediaURL(id, cfg)
		}
		out["status"] = "Ready"
		out["result"] = res
	}
	writeJSON(w, http.StatusOK, out)
}

// bflStatusDetail is the detail string for a BFL HTTP error.
func bflStatusDetail(code int) string {
	switch code {
	case http.StatusPaymentRequired:
		return "Insufficient credits. Add credits to your account to continue using the API."
	case http.StatusTooManyRequests:
		return "You have exceeded the number of allowed active tasks."
	}
	return http.StatusText(code)
}
