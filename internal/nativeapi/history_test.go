package nativeapi

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// TestHistoryOf: a finished job in ComfyUI's history shape.
func TestHistoryOf(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	started, completed := created.Add(time.Second), created.Add(3*time.Second)
	base := storage.Job{ID: jobID, CreatedAt: created, StartedAt: &started, CompletedAt: &completed,
		Workflow: json.RawMessage(`{"3":{"class_type":"SaveImage","inputs":{}}}`),
		Outputs: []storage.Output{
			{NodeID: "3", Type: "image", Asset: storage.Asset{FilePath: jobID + "/a_00001_.png"}},
			{NodeID: "9", Type: "audio", Asset: storage.Asset{FilePath: jobID + "/sub/b.flac"}},
			{NodeID: "3", Type: "image", Asset: storage.Asset{FilePath: jobID + "/a_00002_.png"}},
		}}
	tests := []struct {
		status, errJSON string
		want            string // status object
	}{
		{storage.JobSucceeded, "", `{"status_str":"success","completed":true,"messages":[` +
			`["execution_start",{"prompt_id":"` + jobID + `","timestamp":1767323046000}],` +
			`["execution_cached",{"nodes":[],"prompt_id":"` + jobID + `","timestamp":1767323046000}],` +
			`["execution_success",{"prompt_id":"` + jobID + `","timestamp":1767323048000}]]}`},
		{storage.JobFailed, `{"code":"node_execution_error","message":"boom","node_id":"9","class_type":"X","traceback":"tb"}`,
			`{"status_str":"error","completed":false,"messages":[` +
				`["execution_start",{"prompt_id":"` + jobID + `","timestamp":1767323046000}],` +
				`["execution_cached",{"nodes":[],"prompt_id":"` + jobID + `","timestamp":1767323046000}],` +
				`["execution_error",{"current_inputs":{},"current_outputs":{},"exception_message":"boom",` +
				`"exception_type":"node_execution_error","executed":["3"],"node_id":"9","node_type":"X",` +
				`"prompt_id":"` + jobID + `","timestamp":1767323048000,"traceback":["tb"]}]]}`},
		{storage.JobCanceled, "", `{"status_str":"error","completed":false,"messages":[` +
			`["execution_start",{"prompt_id":"` + jobID + `","timestamp":1767323046000}],` +
			`["execution_cached",{"nodes":[],"prompt_id":"` + jobID + `","timestamp":1767323046000}],` +
			`["execution_interrupted",{"executed":["3","9"],"node_id":"","node_type":"","prompt_id":"` + jobID + `","timestamp":1767323048000}]]}`},
	}
	for _, tc := range tests {
		t.Run(tc.status, func(t *testing.T) {
			j := base
			j.Status, j.Error = tc.status, json.RawMessage(tc.errJSON)
			if !InHistory(j) {
				t.Fatal("not in history")
			}
			e := HistoryOf(j, "client-7", nil)
			b, _ := json.Marshal(e)
			var got struct {
				Prompt  []json.RawMessage `json:"prompt"`
				Outputs json.RawMessage   `json:"outputs"`
				Status  json.RawMessage   `json:"status"`
				Meta    json.RawMessage   `json:"meta"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Prompt) != 5 || string(got.Prompt[1]) != `"`+jobID+`"` ||
				string(got.Prompt[0]) != "1767323045000" || string(got.Prompt[3]) != `{"client_id":"client-7"}` ||
				string(got.Prompt[4]) != `["3","9"]` {
				t.Errorf("prompt tuple %s", b)
			}
			wantOutputs := `{"3":{"images":[{"filename":"a_00001_.png","subfolder":"` + jobID + `","type":"output"},` +
				`{"filename":"a_00002_.png","subfolder":"` + jobID + `","type":"output"}]},` +
				`"9":{"audio":[{"filename":"b.flac","subfolder":"` + jobID + `/sub","type":"output"}]}}`
			if !jsonEqual(t, got.Outputs, []byte(wantOutputs)) {
				t.Errorf("outputs %s", got.Outputs)
			}
			if !jsonEqual(t, got.Status, []byte(tc.want)) {
				t.Errorf("status %s\nwant   %s", got.Status, tc.want)
			}
		})
	}
	for _, s := range []string{storage.JobQueued, storage.JobRunning, storage.JobCanceling, storage.JobExpired} {
		if InHistory(storage.Job{Status: s}) {
			t.Errorf("a %s job is in the history", s)
		}
	}
}

// TestHistoryOrder: /history's object keeps its members in order.
func TestHistoryOrder(t *testing.T) {
	h := History{{ID: "b"}, {ID: "a"}, {ID: "c"}}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytesReader(b))
	var keys []string
	dec.Token()
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		var skip json.RawMessage
		dec.Decode(&skip)
	}
	if len(keys) != 3 || keys[0] != "b" || keys[1] != "a" || keys[2] != "c" {
		t.Errorf("keys %v", keys)
	}
	if b, _ := json.Marshal(History{}); string(b) != "{}" {
		t.Errorf("empty history %s", b)
	}
}

// TestFrames: a traceback stored joined is ComfyUI's list of frames again.
func TestFrames(t *testing.T) {
	f1 := "  File \"execution.py\", line 152, in recursive_execute\n    output_data = get(obj)\n"
	f2 := "  File \"nodes.py\", line 1489, in load_image\n    img = open(path)\n          ^^^^\n"
	tests := []struct {
		in   string
		want []string
	}{
		{"", []string{}},
		{f1, []string{f1}},
		{f1 + f2, []string{f1, f2}},
		{f1 + f2 + f1, []string{f1, f2, f1}},
		{"panic: boom\n  File \"x\"", []string{"panic: boom\n  File \"x\""}},
		{"tb", []string{"tb"}},
	}
	for _, tc := range tests {
		if got := Frames(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Frames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
