package nativeapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/workflow"
)

// ErrorInfo is ComfyUI's error object: the top-level `error` of a refused
// prompt and each entry of a node's `errors`.
type ErrorInfo struct {
	Type      string         `json:"type"`
	Message   string         `json:"message"`
	Details   string         `json:"details"`
	ExtraInfo map[string]any `json:"extra_info"`
}

// NodeError is one node's entry of a refused prompt's `node_errors`.
type NodeError struct {
	Errors           []ErrorInfo `json:"errors"`
	DependentOutputs []string    `json:"dependent_outputs"`
	ClassType        string      `json:"class_type"`
}

// Rejection is a refused POST /prompt in ComfyUI's shape:
// {"error": {...}, "node_errors": {...}} with its HTTP status.
type Rejection struct {
	Status int
	// RetryAfter, when positive, is sent as Retry-After (seconds).
	RetryAfter int
	Body       RejectionBody
}

// RejectionBody is the JSON of a Rejection. NodeErrors is a map of
// NodeError, or an empty list where ComfyUI answers one.
type RejectionBody struct {
	Error      ErrorInfo `json:"error"`
	NodeErrors any       `json:"node_errors"`
}

func (r *Rejection) Error() string {
	return fmt.Sprintf("prompt refused (%d): %s: %s", r.Status, r.Body.Error.Type, r.Body.Error.Message)
}

// comfyMessages are ComfyUI's own messages for the validation types the
// workflow package mirrors; the specifics go in details.
var comfyMessages = map[string]string{
	workflow.ReasonRequiredInputMissing: "Required input is missing",
	workflow.ReasonReturnTypeMismatch:   "Return type mismatch between linked nodes",
	workflow.ReasonValueNotInList:       "Value not in list",
	workflow.ReasonBadLinkedInput:       "Bad linked input, must be a length-2 list of [node_id, slot_index]",
	workflow.ReasonInvalidInputType:     "Failed to convert an input value",
	workflow.ReasonValueSmallerThanMin:  "Value smaller than min",
	workflow.ReasonValueBiggerThanMax:   "Value bigger than max",
	reasonCustomValidation:              "Custom validation failed for node",
}

// reasonCustomValidation is how ComfyUI reports a file picker whose file is
// not there (LoadImage: "image - Invalid image file: x.png"); comfygate's
// missing_asset says the same of a name that is not the caller's asset.
const reasonCustomValidation = "custom_validation_failed"

// validationDetails is the part of a v2 validation error's details this
// translation reads.
type validationDetails struct {
	NodeErrors map[string][]workflow.FieldError `json:"node_errors"`
	Errors     []workflow.GraphError            `json:"errors"`
	Member     string                           `json:"member"`
	Limit      string                           `json:"limit"`
}

// Reject translates what the jobs service refused a prompt with into
// ComfyUI's answer. g is the prompt when it could be decoded (nil
// otherwise) and cat the pool's catalog (nil when unknown); they name each
// failing node's class and the output nodes that depend on it. ok is false
// for errors that are not the client's (those go to the error envelope).
func Reject(err error, g workflow.Graph, cat workflow.Catalog) (*Rejection, bool) {
	e, ok := apierr.As(err)
	if !ok || e.Status >= 500 && e.Status != http.StatusServiceUnavailable {
		return nil, false
	}
	var d validationDetails
	if e.Details != nil {
		if raw, err := json.Marshal(e.Details); err == nil {
			_ = json.Unmarshal(raw, &d)
		}
	}
	switch {
	case e.Code == "invalid_workflow" && len(d.NodeErrors) > 0:
		return nodeRejection(d.NodeErrors, g, cat), true
	case e.Code == "invalid_workflow" && len(d.Errors) > 0 && d.Errors[0].Reason == workflow.ReasonPromptNoOutputs:
		return &Rejection{Status: http.StatusBadRequest, Body: RejectionBody{
			Error:      ErrorInfo{Type: workflow.ReasonPromptNoOutputs, Message: "Prompt has no outputs", ExtraInfo: map[string]any{}},
			NodeErrors: []any{},
		}}, true
	case e.Code == "missing_asset" && len(d.NodeErrors) > 0:
		return nodeRejection(assetErrors(d.NodeErrors), g, cat), true
	case e.Status == http.StatusTooManyRequests, e.Status == http.StatusRequestEntityTooLarge,
		e.Status == http.StatusServiceUnavailable:
		return &Rejection{Status: e.Status, RetryAfter: e.RetryAfter, Body: RejectionBody{
			Error:      ErrorInfo{Type: e.Code, Message: e.Message, ExtraInfo: map[string]any{}},
			NodeErrors: map[string]NodeError{},
		}}, true
	}
	details := ""
	if d.Member != "" {
		details = "member " + d.Member
	} else if d.Limit != "" {
		details = "limit " + d.Limit
	}
	return &Rejection{Status: http.StatusBadRequest, Body: RejectionBody{
		Error:      ErrorInfo{Type: "invalid_prompt", Message: e.Message, Details: details, ExtraInfo: map[string]any{}},
		NodeErrors: map[string]NodeError{},
	}}, true
}

// InvalidPrompt is a prompt refused before it reached the jobs service (no
// `prompt`, a bad prompt_id, an option comfygate does not run).
func InvalidPrompt(typ, message, details string) *Rejection {
	var nodeErrors any = map[string]NodeError{}
	if typ == "no_prompt" {
		nodeErrors = []any{}
	}
	return &Rejection{Status: http.StatusBadRequest, Body: RejectionBody{
		Error:      ErrorInfo{Type: typ, Message: message, Details: details, ExtraInfo: map[string]any{}},
		NodeErrors: nodeErrors,
	}}
}

// assetErrors restates missing_asset entries as ComfyUI's failed custom
// validation of a file picker.
func assetErrors(ne map[string][]workflow.FieldError) map[string][]workflow.FieldError {
	out := make(map[string][]workflow.FieldError, len(ne))
	for id, errs := range ne {
		for _, fe := range errs {
			fe.Message = fe.Field + " - " + fe.Message
			fe.Reason = reasonCustomValidation
			out[id] = append(out[id], fe)
		}
	}
	return out
}

// nodeRejection builds the answer to a prompt whose nodes failed. A node
// without a class_type, or of a class the pool lacks, is reported alone as
// ComfyUI does (it stops at the first such node).
func nodeRejection(ne map[string][]workflow.FieldError, g workflow.Graph, cat workflow.Catalog) *Rejection {
	ids := make([]string, 0, len(ne))
	for id := range ne {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, fe := range ne[id] {
			if fe.Reason != workflow.ReasonMissingNodeType {
				continue
			}
			class := g[id].ClassType
			if class == "" {
				return &Rejection{Status: http.StatusBadRequest, Body: RejectionBody{
					Error: ErrorInfo{Type: "invalid_prompt", Message: "Cannot execute because a node is missing the class_type property.",
						Details: fmt.Sprintf("Node ID '#%s'", id), ExtraInfo: map[string]any{}},
					NodeErrors: map[string]NodeError{},
				}}
			}
			return &Rejection{Status: http.StatusBadRequest, Body: RejectionBody{
				Error: ErrorInfo{Type: workflow.ReasonMissingNodeType,
					Message:   fmt.Sprintf("Node '%s' not found. The custom node may not be installed.", class),
					Details:   fmt.Sprintf("Node ID '#%s'", id),
					ExtraInfo: map[string]any{"node_id": id, "class_type": class}},
				NodeErrors: map[string]NodeError{},
			}}
		}
	}
	dependents := dependentOutputs(g, cat)
	out := make(map[string]NodeError, len(ids))
	var lines []string
	for _, id := range ids {
		entry := NodeError{Errors: []ErrorInfo{}, DependentOutputs: dependents[id], ClassType: g[id].ClassType}
		if entry.DependentOutputs == nil {
			entry.DependentOutputs = []string{}
		}
		for _, fe := range ne[id] {
			info := comfyError(fe)
			entry.Errors = append(entry.Errors, info)
			lines = append(lines, info.Message+": "+info.Details)
		}
		out[id] = entry
	}
	return &Rejection{Status: http.StatusBadRequest, Body: RejectionBody{
		Error: ErrorInfo{Type: "prompt_outputs_failed_validation", Message: "Prompt outputs failed validation",
			Details: strings.Join(lines, "\n"), ExtraInfo: map[string]any{}},
		NodeErrors: out,
	}}
}

// comfyError renders one field error: ComfyUI's message for its type when
// it has one, with comfygate's sentence (less that message) as details.
func comfyError(fe workflow.FieldError) ErrorInfo {
	msg, details := fe.Message, fe.Message
	if title, ok := comfyMessages[fe.Reason]; ok {
		msg = title
		details = strings.TrimPrefix(strings.TrimPrefix(fe.Message, title), ": ")
	}
	extra := map[string]any{}
	if fe.Field != "" && fe.Field != "class_type" {
		extra["input_name"] = fe.Field
	}
	return ErrorInfo{Type: fe.Reason, Message: msg, Details: details, ExtraInfo: extra}
}

// dependentOutputs maps every node to the output nodes (per cat) that read
// from it, directly or not, itself included when it is one; sorted.
func dependentOutputs(g workflow.Graph, cat workflow.Catalog) map[string][]string {
	out := map[string][]string{}
	for id, n := range g {
		if c, ok := cat[n.ClassType]; !ok || !c.OutputNode {
			continue
		}
		seen := map[string]bool{}
		var visit func(node string)
		visit = func(node string) {
			if seen[node] {
				return
			}
			seen[node] = true
			out[node] = append(out[node], id)
			for _, raw := range g[node].Inputs {
				if l, ok := workflow.ParseLink(raw); ok {
					if _, exists := g[l.Node]; exists {
						visit(l.Node)
					}
				}
			}
		}
		visit(id)
	}
	for _, list := range out {
		sort.Strings(list)
	}
	return out
}
