package workflow

import (
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/comfygate/comfygate/internal/apierr"
)

// Reasons that ComfyUI itself uses (execution.py validate_prompt /
// validate_inputs), kept verbatim so that clients written against ComfyUI
// read ours the same way.
const (
	ReasonRequiredInputMissing = "required_input_missing"
	ReasonReturnTypeMismatch   = "return_type_mismatch"
	ReasonValueNotInList       = "value_not_in_list"
	ReasonValueSmallerThanMin  = "value_smaller_than_min"
	ReasonValueBiggerThanMax   = "value_bigger_than_max"
	ReasonInvalidInputType     = "invalid_input_type"
	ReasonBadLinkedInput       = "bad_linked_input"
	// ReasonMissingNodeType is what current ComfyUI reports both for a node
	// without class_type and for a class it does not know.
	ReasonMissingNodeType = "missing_node_type"
	// ReasonPromptNoOutputs is a graph-level error: no output node.
	ReasonPromptNoOutputs = "prompt_no_outputs"
)

// Reasons ComfyUI lacks (it crashes or recurses instead).
const (
	ReasonInvalidNodeID      = "invalid_node_id"
	ReasonInvalidNode        = "invalid_node" // node or its inputs not an object
	ReasonDanglingLink       = "dangling_link"
	ReasonInvalidOutputSlot  = "invalid_output_slot"
	ReasonCycle              = "cycle"
	ReasonMalformedAssetRef  = "malformed_asset_reference"
	ReasonUnresolvedAssetRef = "unresolved_asset_reference"
	// ReasonOverMemoryLimit is a node by which the workflow holds more
	// memory than a job of the built-in executor may.
	ReasonOverMemoryLimit = "over_memory_limit"
)

// FieldError is one entry of details.node_errors[node_id].
type FieldError struct {
	// Field is the input name, "class_type", or "" for the node as a whole.
	Field   string `json:"field"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// NodeErrors maps node id to every problem found on that node.
type NodeErrors map[string][]FieldError

func (ne NodeErrors) add(node, field, reason, format string, args ...any) {
	ne[node] = append(ne[node], FieldError{Field: field, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// GraphError is a problem of the graph as a whole (details.errors).
type GraphError struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// invalidWorkflow builds the 422 carrying every collected problem:
// details.node_errors (always present) and details.errors (graph-level, only
// when there are some).
func invalidWorkflow(ne NodeErrors, graph []GraphError) *apierr.Error {
	details := map[string]any{"node_errors": ne}
	if len(graph) > 0 {
		details["errors"] = graph
	}
	msg := "the workflow failed validation"
	if len(ne) > 0 {
		msg = fmt.Sprintf("the workflow failed validation on %d node(s)", len(ne))
	}
	if len(ne) == 0 && len(graph) > 0 {
		msg = "the workflow failed validation: " + graph[0].Message
	}
	return apierr.InvalidWorkflow(msg).WithDetails(details)
}

// sortedIDs gives the graph's node ids in a stable order so that error lists
// and traversals are deterministic.
func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// quote renders a client-supplied value for a message, shortened so that an
// error never echoes a megabyte back.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return fmt.Sprintf("%q", s)
}
