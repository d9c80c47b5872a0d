package workflow

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/comfygate/comfygate/internal/apierr"
)

// Submission is a parsed POST /api/v2/jobs body.
type Submission struct {
	// Workflow is the decoded graph; Validate it against the target pool.
	Workflow Graph
	// RawWorkflow is the `workflow` member exactly as sent, for storage and
	// GET /jobs/{id}/workflow.
	RawWorkflow json.RawMessage
	// ExtraData is the closed `extra_data` (only api_key_comfy_org). It is
	// forwarded per prompt and must never be persisted or logged.
	ExtraData map[string]string
}

// allowedExtraData is the closed set of extra_data members.
var allowedExtraData = map[string]bool{"api_key_comfy_org": true}

// reservedMembers are top-level members the contract reserves and rejects.
var reservedMembers = map[string]bool{"webhook_url": true, "inputs": true}

// ParseSubmit reads a submit body. Order of checks, each a distinct answer:
//   - over MaxBodyBytes → 413 payload_too_large;
//   - a cap crossed (depth, string, array, node count) → 422 invalid_workflow
//     with details {limit, max}, found by a byte scan before any decoding;
//   - not JSON, or not an object → 400 invalid_request;
//   - UI export format (top level or `workflow`) → 422 workflow_format_ui;
//   - reserved (`webhook_url`, `inputs`) or unknown top-level members,
//     missing or non-object `workflow`, bad `extra_data` → 422
//     invalid_workflow with details {member};
//   - a node that is not an object, a non-string class_type, non-object
//     inputs → 422 invalid_workflow with details.node_errors.
//
// It does not consult any catalog; Validate does that.
func ParseSubmit(body []byte, lim Limits) (*Submission, error) {
	lim = lim.withDefaults()
	if int64(len(body)) > lim.MaxBodyBytes {
		return nil, apierr.PayloadTooLarge(lim.MaxBodyBytes)
	}
	if err := scan(body, lim); err != nil {
		return nil, err
	}
	// Validate the syntax once; every level below is then split without
	// re-validating (objectMembers), falling back to json.Unmarshal only
	// for member names it does not decode itself.
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v) // for the error's detail
		return nil, apierr.InvalidRequest("the body is not a valid JSON object").WithCause(err)
	}
	top, err := members(body)
	if err != nil {
		return nil, apierr.InvalidRequest("the body is not a valid JSON object").WithCause(err)
	}
	if top == nil {
		return nil, apierr.InvalidRequest("the body must be a JSON object")
	}
	if isUIFormat(top) {
		return nil, uiFormatError()
	}
	for _, name := range sortedIDs(top) {
		switch {
		case reservedMembers[name]:
			return nil, memberError(name, "member "+quote(name)+" is reserved and not accepted")
		case name != "workflow" && name != "extra_data":
			return nil, memberError(name, "unknown member "+quote(name))
		}
	}
	rawWF := bytes.TrimSpace(top["workflow"])
	if len(rawWF) == 0 || rawWF[0] != '{' {
		return nil, memberError("workflow", `"workflow" must be an object holding the API-format graph`)
	}
	nodes, err := members(rawWF)
	if err != nil {
		return nil, apierr.InvalidRequest("the body is not valid JSON").WithCause(err)
	}
	if isUIFormat(nodes) {
		return nil, uiFormatError()
	}
	if len(nodes) > lim.MaxNodes {
		return nil, limitError("max_nodes", lim.MaxNodes)
	}
	extra, err := parseExtraData(top["extra_data"])
	if err != nil {
		return nil, err
	}
	g, err := decodeGraph(nodes)
	if err != nil {
		return nil, err
	}
	return &Submission{Workflow: g, RawWorkflow: rawWF, ExtraData: extra}, nil
}

// isUIFormat recognises the UI export (litegraph): a `nodes` list beside
// `links`. An API-format node is always an object, so a list named `nodes`
// cannot be one.
func isUIFormat(obj map[string]json.RawMessage) bool {
	n := bytes.TrimSpace(obj["nodes"])
	_, hasLinks := obj["links"]
	return hasLinks && len(n) > 0 && n[0] == '['
}

func uiFormatError() *apierr.Error {
	return apierr.New(http.StatusUnprocessableEntity, "workflow_format_ui",
		"the workflow is in UI format; export it with \"Export (API)\" and submit the API format")
}

func memberError(member, msg string) *apierr.Error {
	return apierr.InvalidWorkflow(msg).WithDetails(map[string]any{"member": member})
}

func parseExtraData(raw json.RawMessage) (map[string]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var members map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &members) != nil {
		return nil, memberError("extra_data", `"extra_data" must be an object`)
	}
	out := make(map[string]string, len(members))
	for _, name := range sortedIDs(members) {
		if !allowedExtraData[name] {
			return nil, memberError("extra_data."+name, "unknown extra_data member "+quote(name))
		}
		var s string
		if json.Unmarshal(members[name], &s) != nil {
			return nil, memberError("extra_data."+name, "extra_data member "+quote(name)+" must be a string")
		}
		out[name] = s
	}
	return out, nil
}

// decodeGraph turns each node into a Node, collecting every node that cannot
// be represented at all. Missing class_type and bad ids are representable
// and left to Validate, so they are reported together with catalog errors.
func decodeGraph(nodes map[string]json.RawMessage) (Graph, error) {
	g := make(Graph, len(nodes))
	bad := NodeErrors{}
	for id, raw := range nodes { // each node's errors are its own: order does not show
		raw = bytes.TrimSpace(raw)
		f, ok := nodeFieldsOf(raw)
		if !ok {
			bad.add(id, "", ReasonInvalidNode, "a node must be an object with class_type and inputs")
			continue
		}
		var n Node
		var err error
		if ct, ok := f.classType, f.hasClassType; ok {
			if isPlainString(ct) {
				n.ClassType = intern(ct[1 : len(ct)-1])
			} else if json.Unmarshal(ct, &n.ClassType) != nil {
				bad.add(id, "class_type", ReasonMissingNodeType, "class_type must be a string")
			}
		}
		if in := bytes.TrimSpace(f.inputs); len(in) > 0 && !bytes.Equal(in, []byte("null")) {
			if in[0] != '{' {
				bad.add(id, "inputs", ReasonInvalidNode, "inputs must be an object")
			} else if n.Inputs, err = members(in); err != nil {
				bad.add(id, "inputs", ReasonInvalidNode, "inputs must be an object")
			}
		}
		if f.hasMeta {
			n.Meta = f.meta
		}
		g[id] = n
	}
	if len(bad) > 0 {
		return nil, invalidWorkflow(bad, nil)
	}
	return g, nil
}

// unmarshalString is json.Unmarshal into a string of its own, so that
// the caller's variables stay off the heap; a plain string is read without
// the decoder.
func unmarshalString(raw []byte) (string, bool) {
	if s, ok := plainString(raw); ok {
		return s, true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// DecodeGraph decodes a stored API-format workflow (the RawWorkflow of a
// submission that passed ParseSubmit) exactly as ParseSubmit decoded it
// for validation. encoding/json would not do: it matches member names in
// any case, so a "CLASS_TYPE" member beside "class_type" could swap in a
// class nobody validated.
func DecodeGraph(raw []byte) (Graph, error) {
	nodes, err := members(raw)
	if err != nil {
		return nil, err
	}
	return decodeGraph(nodes)
}

// members decodes a JSON object (from a body that passed json.Valid) into
// its raw members, as json.Unmarshal into map[string]json.RawMessage does.
func members(raw []byte) (map[string]json.RawMessage, error) {
	if m, ok := objectMembers(raw); ok {
		return m, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// nodeFields are the members of a node object decodeGraph reads.
type nodeFields struct {
	classType, inputs, meta json.RawMessage
	hasClassType, hasMeta   bool
}

// nodeFieldsOf picks a node object's members (the last of duplicates, as
// json.Unmarshal would) without building a map of them; ok is false when
// raw is not an object.
func nodeFieldsOf(raw []byte) (nodeFields, bool) {
	var f nodeFields
	pick := func(name []byte, value json.RawMessage) {
		switch string(name) {
		case "class_type":
			f.classType, f.hasClassType = value, true
		case "inputs":
			f.inputs = value
		case "_meta":
			f.meta, f.hasMeta = value, true
		}
	}
	if len(raw) == 0 || raw[0] != '{' {
		return f, false
	}
	if eachMember(raw, pick) {
		return f, true
	}
	f = nodeFields{}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return f, false
	}
	for name, value := range m {
		pick([]byte(name), value)
	}
	return f, true
}
