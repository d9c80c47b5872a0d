package provider

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"github.com/comfygate/comfygate/modules/router/catalog"
)

// policyMarkers are the words partners use for content-policy refusals
// (OpenAI moderation_blocked / content_policy_violation, fal's detail type,
// BFL's "Moderated", safety filters).
var policyMarkers = []string{"content_policy", "moderation", "moderated", "safety", "nsfw"}

// mediaKeys are output members that carry media. An output with at least one
// of them and all of them empty is a silent refusal.
var mediaKeys = []string{"images", "image", "video", "videos", "audio", "audio_url", "audio_file", "sample", "samples", "data", "output", "outputs"}

// Classify turns a synchronous partner answer (or a queue result) into an
// outcome.
func Classify(m *catalog.Model, a *Answer) *Outcome {
	switch {
	case a.Status >= 200 && a.Status < 300:
		return classifySuccess(m, a)
	case a.Status == http.StatusUnprocessableEntity:
		return classify422(m, a)
	case a.Status == http.StatusRequestTimeout || a.Status == http.StatusGatewayTimeout || isFalTimeout(a):
		return providerTimeout()
	case a.Status == http.StatusBadRequest && mentionsPolicy(a.Body):
		return contentPolicy(m)
	case a.Status >= 400 && a.Status < 500:
		return providerError("the provider refused the call")
	}
	return providerError("the provider failed to produce a result")
}

func isFalTimeout(a *Answer) bool {
	t := a.Header.Get("X-Fal-Error-Type")
	return t == "request_timeout" || t == "startup_timeout" || a.Header.Get("X-Fal-Request-Timeout-Type") != ""
}

func mentionsPolicy(body []byte) bool {
	low := bytes.ToLower(body)
	for _, w := range policyMarkers {
		if bytes.Contains(low, []byte(w)) {
			return true
		}
	}
	return false
}

func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

func classifySuccess(m *catalog.Model, a *Answer) *Outcome {
	if len(a.Body) == 0 {
		return contentPolicy(m) // "success" with nothing in it
	}
	ct := a.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	if isJSON(ct) {
		var v any
		if err := json.Unmarshal(a.Body, &v); err != nil {
			return providerError("the provider returned an answer that is not valid JSON")
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return providerError("the provider returned an answer that is not a JSON object")
		}
		if withoutMedia(obj) {
			return contentPolicy(m)
		}
	}
	return &Outcome{Status: http.StatusOK, ContentType: ct, Body: a.Body, Billable: true}
}

// withoutMedia reports an output that has media members, all empty, or
// flags every item as NSFW.
func withoutMedia(obj map[string]any) bool {
	if flags, ok := obj["has_nsfw_concepts"].([]any); ok && len(flags) > 0 {
		all := true
		for _, f := range flags {
			if b, _ := f.(bool); !b {
				all = false
			}
		}
		if all {
			return true
		}
	}
	seen := false
	for _, k := range mediaKeys {
		v, ok := obj[k]
		if !ok {
			continue
		}
		seen = true
		if !empty(v) {
			return false
		}
	}
	return seen
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// classify422 passes a FastAPI detail list through unchanged, except that a
// list whose entries are content-policy refusals is that bucket.
func classify422(m *catalog.Model, a *Answer) *Outcome {
	var body struct {
		Detail []json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal(a.Body, &body); err != nil || len(body.Detail) == 0 {
		return providerError("the provider rejected the call without a usable explanation")
	}
	for _, d := range body.Detail {
		var e struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(d, &e) == nil && strings.Contains(strings.ToLower(e.Type), "content_policy") {
			return contentPolicy(m)
		}
	}
	out, _ := json.Marshal(map[string]any{"detail": body.Detail})
	return &Outcome{Bucket: BucketInvalidInput, Status: http.StatusUnprocessableEntity, ContentType: "application/json", Body: out}
}
