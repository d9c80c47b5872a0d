// Package workflow parses and validates ComfyUI API-format workflows for
// POST /api/v2/jobs, synchronously, against a pool's node catalog held in
// ComfyUI's own /object_info shape. The built-in executor publishes its
// nodes in that shape too, so one validator serves both kinds of pool.
//
// The pipeline a submit handler runs:
//
//	sub, err := ParseSubmit(body, lim)        // caps, format, members, node shape
//	refs, err := AssetRefs(sub.Workflow, cat) // asset references to resolve
//	err = Validate(sub.Workflow, cat, WithResolvedInputs(resolved))
//
// Every error is an *apierr.Error. Validation errors are 422
// invalid_workflow with details.node_errors[node_id] = []FieldError{field,
// reason, message}, collecting every problem at once as ComfyUI does, with
// ComfyUI's own reason strings where it has one (required_input_missing,
// return_type_mismatch, value_not_in_list, value_smaller_than_min,
// value_bigger_than_max, invalid_input_type, bad_linked_input,
// missing_node_type, prompt_no_outputs) and ours where it has none
// (invalid_node_id, invalid_node, dangling_link, invalid_output_slot, cycle,
// unresolved_asset_reference). Graph-level problems (prompt_no_outputs) go
// in details.errors.
//
// The package imports nothing from Caddy.
package workflow
