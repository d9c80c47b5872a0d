package workflow

import (
	"reflect"
	"testing"
)

// TestDecodeGraphMatchesParseSubmit: the graph a runner decodes from the
// stored workflow is the one validation saw, also when member names differ
// only in case (which encoding/json would fold together).
func TestDecodeGraphMatchesParseSubmit(t *testing.T) {
	for _, body := range []string{
		`{"workflow":{"1":{"class_type":"SaveImage","inputs":{"a":1},"CLASS_TYPE":"Evil","Inputs":{"b":2}}}}`,
		`{"workflow":{"1":{"class_type":"EmptyImage","inputs":{"width":8,"height":8}},"2":{"class_type":"SaveImage","inputs":{"images":["1",0]},"_meta":{"title":"out"}}}}`,
	} {
		sub, err := ParseSubmit([]byte(body), Limits{})
		if err != nil {
			t.Fatalf("ParseSubmit(%s): %v", body, err)
		}
		got, err := DecodeGraph(sub.RawWorkflow)
		if err != nil {
			t.Fatalf("DecodeGraph: %v", err)
		}
		if !reflect.DeepEqual(got, sub.Workflow) {
			t.Errorf("DecodeGraph = %+v; ParseSubmit saw %+v", got, sub.Workflow)
		}
	}
	g, _ := DecodeGraph([]byte(`{"1":{"class_type":"SaveImage","inputs":{"a":1},"CLASS_TYPE":"Evil","Inputs":{"b":2}}}`))
	if n := g["1"]; n.ClassType != "SaveImage" || len(n.Inputs) != 1 {
		t.Errorf("case-variant members leaked into the node: %+v", n)
	}
}
