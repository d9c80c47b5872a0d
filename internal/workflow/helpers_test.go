package workflow

import (
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
)

// validWorkflow is LoadImage → ImageInvert → SaveImage.
const validWorkflow = `{
  "1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}, "_meta": {"title": "Load"}},
  "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
  "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "out"}}
}`

func graphOf(t testing.TB, workflow string) Graph {
	t.Helper()
	sub, err := ParseSubmit([]byte(`{"workflow":`+workflow+`}`), DefaultLimits())
	if err != nil {
		t.Fatalf("ParseSubmit: %v", err)
	}
	return sub.Workflow
}

// wantAPIError checks an error's status and code and returns it.
func wantAPIError(t *testing.T, err error, status int, code string) *apierr.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %d %s", status, code)
	}
	ae, ok := apierr.As(err)
	if !ok {
		t.Fatalf("err = %v, not an *apierr.Error", err)
	}
	if ae.Status != status || ae.Code != code {
		t.Fatalf("err = %d %s (%s), want %d %s", ae.Status, ae.Code, ae.Message, status, code)
	}
	return ae
}

func nodeErrorsOf(t *testing.T, ae *apierr.Error) NodeErrors {
	t.Helper()
	ne, ok := ae.Details["node_errors"].(NodeErrors)
	if !ok {
		t.Fatalf("details.node_errors = %#v", ae.Details["node_errors"])
	}
	return ne
}

// hasFieldError reports whether ne holds an entry for node with field and
// reason.
func hasFieldError(ne NodeErrors, node, field, reason string) bool {
	for _, fe := range ne[node] {
		if fe.Field == field && fe.Reason == reason && fe.Message != "" {
			return true
		}
	}
	return false
}
