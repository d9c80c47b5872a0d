package workflow

import (
	"github.com/comfygate/comfygate/internal/apierr"
)

// scan walks the body's bytes once, without building anything, and refuses
// it as soon as a cap is crossed. It runs before any decoding so that a
// 10 000-deep nesting or a 100 000-node graph costs a few microseconds and no
// heap proportional to its size. It tracks only structure (containers,
// strings, literals); full syntax is left to json.Valid, which runs next
// and rejects anything this pass lets through as malformed.
func scan(body []byte, lim Limits) *apierr.Error {
	type frame struct {
		object    bool
		expectKey bool // object only: the next string is a member name
		workflow  bool // the top-level "workflow" object: counts nodes
		count     int
	}
	var buf [80]frame
	stack := buf[:0]
	workflowKey := false // the last top-level key read was "workflow"
	started := false

	// valueStart counts one value in the enclosing array and reports
	// whether it may begin here.
	valueStart := func() *apierr.Error {
		if len(stack) == 0 {
			if started {
				return apierr.InvalidRequest("the body must be a single JSON object")
			}
			started = true
			return nil
		}
		top := &stack[len(stack)-1]
		if !top.object {
			top.count++
			if top.count > lim.MaxArrayLen {
				return limitError("max_array_len", lim.MaxArrayLen)
			}
		}
		return nil
	}

	for i := 0; i < len(body); i++ {
		c := body[i]
		switch c {
		case ' ', '\t', '\n', '\r', ':':
			continue
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = true
			}
		case '{', '[':
			if len(stack) == 0 && c != '{' {
				return apierr.InvalidRequest("the body must be a JSON object")
			}
			if err := valueStart(); err != nil {
				return err
			}
			if len(stack) >= lim.MaxDepth {
				return limitError("max_depth", lim.MaxDepth)
			}
			isWorkflow := c == '{' && len(stack) == 1 && workflowKey
			workflowKey = false
			stack = append(stack, frame{object: c == '{', expectKey: c == '{', workflow: isWorkflow})
		case '}', ']':
			n := len(stack)
			if n == 0 || stack[n-1].object != (c == '}') {
				return apierr.InvalidRequest("the body is not valid JSON: unbalanced brackets")
			}
			stack = stack[:n-1]
		case '"':
			end, ok := stringEnd(body, i)
			if !ok {
				return apierr.InvalidRequest("the body is not valid JSON: unterminated string")
			}
			if end-i-1 > lim.MaxStringBytes {
				return limitError("max_string_bytes", lim.MaxStringBytes)
			}
			n := len(stack)
			if n > 0 && stack[n-1].object && stack[n-1].expectKey {
				top := &stack[n-1]
				top.expectKey = false
				top.count++
				if top.workflow && top.count > lim.MaxNodes {
					return limitError("max_nodes", lim.MaxNodes)
				}
				if !top.workflow && top.count > lim.MaxArrayLen {
					return limitError("max_array_len", lim.MaxArrayLen)
				}
				if n == 1 {
					workflowKey = string(body[i+1:end]) == "workflow"
				}
			} else {
				if n == 0 {
					return apierr.InvalidRequest("the body must be a JSON object")
				}
				if err := valueStart(); err != nil {
					return err
				}
				workflowKey = false
			}
			i = end
		default:
			// A literal (number, true, false, null) or garbage: skip it whole.
			if len(stack) == 0 {
				return apierr.InvalidRequest("the body must be a JSON object")
			}
			if err := valueStart(); err != nil {
				return err
			}
			workflowKey = false
			j := i
			for j < len(body) && !isDelimiter(body[j]) {
				j++
			}
			if j-i > maxNumberBytes {
				return limitError("max_number_bytes", maxNumberBytes)
			}
			i = j - 1
		}
	}
	if !started {
		return apierr.InvalidRequest("the body is empty")
	}
	if len(stack) != 0 {
		return apierr.InvalidRequest("the body is not valid JSON: unexpected end")
	}
	return nil
}

// stringEnd returns the index of the quote closing the string opened at
// body[start].
func stringEnd(body []byte, start int) (int, bool) {
	for j := start + 1; j < len(body); j++ {
		switch body[j] {
		case '\\':
			j++
		case '"':
			return j, true
		}
	}
	return 0, false
}

func isDelimiter(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', ',', ':', '{', '}', '[', ']', '"':
		return true
	}
	return false
}
