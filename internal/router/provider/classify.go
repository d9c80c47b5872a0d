package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"

	"github.com/comfygate/comfygate/internal/router/catalog"
)

// policyMarkers are the words partners use for content-policy refusals
// (OpenAI moderation_blocked / content_policy_violation, fal's detail type,
// BFL's "Moderated", safety filters), looked for in the fields an error
// names its kind in (see policyRefusal).
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
	case a.Status == http.StatusBadRequest && policyRefusal(a.Body):
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

// policyRefusal reports a 400 whose error names a content-policy refusal
// as its kind: a code, type or status member (at the top level, under
// "error", or under "detail", an object or a list of them) holding a
// policy marker. The rest of the text does not count: "enable_safety_checker
// must be a boolean" is a parameter error, and a client told
// content_policy_violation does not retry (and may be charged).
func policyRefusal(body []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return false
	}
	if namesPolicy(top) {
		return true
	}
	var nested map[string]json.RawMessage
	if json.Unmarshal(top["error"], &nested) == nil && namesPolicy(nested) {
		return true
	}
	if json.Unmarshal(top["detail"], &nested) == nil && namesPolicy(nested) {
		return true
	}
	var list []map[string]json.RawMessage
	if json.Unmarshal(top["detail"], &list) == nil {
		for _, d := range list {
			if namesPolicy(d) {
				return true
			}
		}
	}
	return false
}

// namesPolicy reports an error object whose code, type or status is a
// string holding a policy marker.
func namesPolicy(obj map[string]json.RawMessage) bool {
	for _, k := range []string{"code", "type", "status"} {
		var s string
		if json.Unmarshal(obj[k], &s) != nil {
			continue
		}
		s = strings.ToLower(s)
		for _, w := range policyMarkers {
			if strings.Contains(s, w) {
				return true
			}
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
		// Only the top level matters, so the answer is not decoded into a
		// tree (several times its size for a large media answer): each
		// member is probed in place (Unmarshal still validates the whole
		// document) and nothing of it is copied.
		var obj map[string]probe
		if err := json.Unmarshal(a.Body, &obj); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				return providerError("the provider returned an answer that is not a JSON object")
			}
			return providerError("the provider returned an answer that is not valid JSON")
		}
		if obj == nil {
			return providerError("the provider returned an answer that is not a JSON object")
		}
		if withoutMedia(obj) {
			return contentPolicy(m)
		}
	}
	return &Outcome{Status: http.StatusOK, ContentType: ct, Body: a.Body, Billable: true}
}

// probe is what classification needs to know about one top-level member,
// computed from its raw JSON without decoding or keeping it.
type probe struct {
	empty   bool // null, "", [] or {}
	allTrue bool // a non-empty array whose every element is true
}

// UnmarshalJSON is handed the member's raw, already validated JSON.
func (p *probe) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
	case bytes.Equal(b, []byte("null")), bytes.Equal(b, []byte(`""`)):
		p.empty = true
	case b[0] == '[' || b[0] == '{':
		inner := bytes.TrimSpace(b[1 : len(b)-1])
		p.empty = len(inner) == 0
		p.allTrue = b[0] == '[' && !p.empty && allTrue(inner)
	}
	return nil
}

// allTrue reports whether a comma-separated list of JSON values (an array's
// inside) is only `true`s; it stops at the first other element.
func allTrue(list []byte) bool {
	for len(list) > 0 {
		elem, rest, _ := bytes.Cut(list, []byte(","))
		if !bytes.Equal(bytes.TrimSpace(elem), []byte("true")) {
			return false
		}
		list = rest
	}
	return true
}

// withoutMedia reports an output that has media members, all empty, or
// flags every item as NSFW.
func withoutMedia(obj map[string]probe) bool {
	if flags, ok := obj["has_nsfw_concepts"]; ok && flags.allTrue {
		return true
	}
	seen := false
	for _, k := range mediaKeys {
		v, ok := obj[k]
		if !ok {
			continue
		}
		seen = true
		if !v.empty {
			return false
		}
	}
	return seen
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
