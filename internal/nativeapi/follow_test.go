package nativeapi

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/storage"
)

const jobID = "0b9f1c1e-8a44-4c0e-9d1a-6f2b8e7c1a11"

func progress(node string, done, total int, steps ...int) json.RawMessage {
	p := jobs.Progress{NodesDone: done, NodesTotal: total, CurrentNode: &node}
	if len(steps) == 2 {
		p.Step, p.Steps = &steps[0], &steps[1]
	}
	b, _ := json.Marshal(p)
	return b
}

// listed is a snapshot whose nodes_started is started (node "" names none
// running: the last snapshot).
func listed(node string, done, total int, started ...string) json.RawMessage {
	p := jobs.Progress{NodesDone: done, NodesTotal: total, NodesStarted: started}
	if node != "" {
		p.CurrentNode = &node
	}
	b, _ := json.Marshal(p)
	return b
}

func output(node, asset, name string) storage.Output {
	return storage.Output{NodeID: node, Name: name, Type: "image",
		Asset: storage.Asset{ID: asset, FilePath: jobID + "/" + name}}
}

func snapshot(status string, attempt int, outs ...storage.Output) storage.Job {
	started := time.Now()
	j := storage.Job{ID: jobID, Status: status, Attempt: attempt, Outputs: outs, StartedAt: &started}
	if attempt == 0 { // never claimed
		j.StartedAt = nil
	}
	return j
}

// step is one input of a Follower.
type step func(f *Follower) []Frame

func job(j storage.Job) step        { return func(f *Follower) []Frame { return f.Job(j) } }
func prog(raw json.RawMessage) step { return func(f *Follower) []Frame { return f.Progress(raw) } }
func out(o storage.Output) step     { return func(f *Follower) []Frame { return f.Output(o) } }
func preview(raw json.RawMessage) step {
	return func(f *Follower) []Frame { return f.Preview(raw, false) }
}

// closing is what a session sends after a step that ended the prompt:
// the queue's status, then the follower's last message.
func closing(f *Follower) []Frame {
	if c := f.Closing(); c != nil {
		return append([]Frame{StatusFrame(0, "")}, c...)
	}
	return nil
}

// summary renders frames as "type[:node]" for comparison.
func summary(t *testing.T, frames []Frame) string {
	t.Helper()
	var parts []string
	for _, fr := range frames {
		if fr.Binary != nil {
			parts = append(parts, fmt.Sprintf("binary%d", binary.BigEndian.Uint32(fr.Binary)))
			continue
		}
		var m struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(fr.Text, &m); err != nil {
			t.Fatal(err)
		}
		if m.Type == "status" {
			parts = append(parts, m.Type)
			continue
		}
		if m.Data["prompt_id"] != jobID {
			t.Errorf("%s carries prompt_id %v", m.Type, m.Data["prompt_id"])
		}
		s := m.Type
		switch m.Type {
		case "executing":
			s += fmt.Sprintf(":%v", m.Data["node"])
		case "progress":
			s += fmt.Sprintf(":%v/%v", m.Data["value"], m.Data["max"])
		case "executed":
			images := m.Data["output"].(map[string]any)["images"].([]any)
			s += fmt.Sprintf(":%v×%d", m.Data["node"], len(images))
		case "execution_error", "execution_interrupted":
			s += fmt.Sprintf(":%v", m.Data["node_id"])
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// TestFollower: comfygate's events, in the orders and repeats the bus and
// snapshots deliver them, become ComfyUI's message sequence, each message
// once.
func TestFollower(t *testing.T) {
	failed := snapshot(storage.JobFailed, 1, output("3", "a1", "x_00001_.png"))
	failed.Error = json.RawMessage(`{"code":"node_execution_error","message":"boom","node_id":"2","class_type":"ImageInvert","traceback":null}`)
	canceled := snapshot(storage.JobCanceled, 1)
	canceled.Progress = progress("2", 1, 3)
	png := json.RawMessage(`{"node_id":"2","content_type":"image/png","data_base64":"iVBORw=="}`)
	tests := []struct {
		name  string
		steps []step
		want  string
	}{
		{
			name: "a built-in run: nodes, two files of one output node, success",
			steps: []step{job(snapshot(storage.JobRunning, 1)), prog(progress("1", 1, 3)), prog(progress("2", 2, 3)),
				out(output("3", "a1", "x_00001_.png")), out(output("3", "a2", "x_00002_.png")), prog(progress("3", 3, 3)),
				job(snapshot(storage.JobSucceeded, 1, output("3", "a1", "x_00001_.png"), output("3", "a2", "x_00002_.png")))},
			want: "execution_start execution_cached executing:1 progress:1/3 executing:2 progress:2/3 executing:3 " +
				"progress:3/3 executed:3×2 execution_success status executing:<nil>",
		},
		{
			name: "a sampler's steps are the progress of its node",
			steps: []step{job(snapshot(storage.JobRunning, 1)), prog(progress("5", 0, 2, 3, 20)),
				prog(progress("5", 0, 2, 4, 20))},
			want: "execution_start execution_cached executing:5 progress:3/20 progress:4/20",
		},
		{
			name: "outputs of a node that ran before the next one start are sent when it starts",
			steps: []step{job(snapshot(storage.JobRunning, 1)), prog(progress("3", 0, 2)),
				out(output("3", "a1", "x.png")), prog(progress("4", 1, 2))},
			want: "execution_start execution_cached executing:3 progress:0/2 executed:3×1 executing:4 progress:1/2",
		},
		{
			name:  "a prompt that ended before it was followed is told whole",
			steps: []step{job(snapshot(storage.JobSucceeded, 1, output("3", "a1", "x.png")))},
			want:  "execution_start execution_cached executing:3 executed:3×1 execution_success status executing:<nil>",
		},
		{
			name: "a late progress event behind a snapshot is dropped",
			steps: []step{job(func() storage.Job {
				j := snapshot(storage.JobRunning, 1)
				j.Progress = progress("2", 2, 3)
				return j
			}()), prog(progress("1", 1, 3))},
			want: "execution_start execution_cached executing:2 progress:2/3",
		},
		{
			name: "an output seen in an event and again in a snapshot is sent once",
			steps: []step{job(snapshot(storage.JobRunning, 1)), out(output("3", "a1", "x.png")),
				job(snapshot(storage.JobRunning, 1, output("3", "a1", "x.png"))),
				job(snapshot(storage.JobSucceeded, 1, output("3", "a1", "x.png")))},
			want: "execution_start execution_cached executing:3 executed:3×1 execution_success status executing:<nil>",
		},
		{
			name:  "failed: outputs so far, then execution_error naming the node",
			steps: []step{job(snapshot(storage.JobRunning, 1)), job(failed)},
			want:  "execution_start execution_cached executing:3 executed:3×1 execution_error:2 status executing:<nil>",
		},
		{
			name:  "interrupted while running",
			steps: []step{job(snapshot(storage.JobRunning, 1)), job(canceled)},
			want:  "execution_start execution_cached executing:2 progress:1/3 execution_interrupted:2 status executing:<nil>",
		},
		{
			name:  "canceled while queued: ComfyUI says nothing of a deleted pending prompt",
			steps: []step{job(snapshot(storage.JobQueued, 0)), job(snapshot(storage.JobCanceled, 0))},
			want:  "",
		},
		{
			name: "a retry on another worker starts over",
			steps: []step{job(snapshot(storage.JobRunning, 1)), prog(progress("1", 1, 2)), job(snapshot(storage.JobQueued, 1)),
				job(snapshot(storage.JobRunning, 2)), prog(progress("1", 1, 2))},
			want: "execution_start execution_cached executing:1 progress:1/2 execution_start execution_cached executing:1 progress:1/2",
		},
		{
			name:  "nothing after the end",
			steps: []step{job(snapshot(storage.JobSucceeded, 1)), prog(progress("9", 9, 9)), out(output("9", "z", "z.png")), preview(png)},
			want:  "execution_start execution_cached execution_success status executing:<nil>",
		},
		{
			name: "a follower that starts mid-run announces the nodes started before, each with its outputs",
			steps: []step{job(func() storage.Job {
				j := snapshot(storage.JobRunning, 1, output("2", "a1", "p.png"))
				j.Progress = listed("4", 3, 5, "1", "2", "3", "4")
				return j
			}()), prog(listed("3", 2, 5, "1", "2", "3")), prog(listed("5", 4, 5, "1", "2", "3", "4", "5")),
				out(output("2", "a1", "p.png")), out(output("5", "a2", "x.png")),
				job(func() storage.Job {
					j := snapshot(storage.JobSucceeded, 1, output("2", "a1", "p.png"), output("5", "a2", "x.png"))
					j.Progress = listed("", 5, 5, "1", "2", "3", "4", "5")
					return j
				}())},
			want: "execution_start execution_cached executing:1 executing:2 executed:2×1 executing:3 executing:4 progress:3/5 " +
				"executing:5 progress:4/5 progress:5/5 executed:5×1 execution_success status executing:<nil>",
		},
		{
			name: "a prompt that ended before it was followed is told whole, every node in order",
			steps: []step{job(func() storage.Job {
				j := snapshot(storage.JobSucceeded, 1, output("3", "a1", "x.png"))
				j.Progress = listed("", 3, 3, "1", "2", "3")
				return j
			}())},
			want: "execution_start execution_cached executing:1 executing:2 executing:3 progress:3/3 executed:3×1 execution_success status executing:<nil>",
		},
		{
			name: "followed from the start, the list repeats nothing; a late output does not announce its node again",
			steps: []step{job(snapshot(storage.JobRunning, 1)), prog(listed("1", 0, 3, "1")), prog(listed("2", 1, 3, "1", "2")),
				out(output("1", "a1", "x.png")), prog(listed("3", 2, 3, "1", "2", "3"))},
			want: "execution_start execution_cached executing:1 progress:0/3 executing:2 progress:1/3 executed:1×1 executing:3 progress:2/3",
		},
		{
			name:  "a node whose own snapshot was dropped is announced from the next one's list",
			steps: []step{job(snapshot(storage.JobRunning, 1)), prog(listed("1", 0, 3, "1")), prog(listed("3", 2, 3, "1", "2", "3"))},
			want:  "execution_start execution_cached executing:1 progress:0/3 executing:2 executing:3 progress:2/3",
		},
		{
			name: "a retry starts the list over",
			steps: []step{job(snapshot(storage.JobRunning, 1)), prog(listed("2", 1, 2, "1", "2")), job(snapshot(storage.JobQueued, 1)),
				job(func() storage.Job {
					j := snapshot(storage.JobRunning, 2)
					j.Progress = listed("2", 1, 2, "1", "2")
					return j
				}())},
			want: "execution_start execution_cached executing:1 executing:2 progress:1/2 execution_start execution_cached executing:1 executing:2 progress:1/2",
		},
		{
			name: "a snapshot of a node that is over, read after the next node's, does not announce it again",
			steps: []step{job(snapshot(storage.JobRunning, 1)), prog(progress("1", 0, 2)), prog(progress("2", 1, 2)),
				prog(progress("1", 1, 2))},
			want: "execution_start execution_cached executing:1 progress:0/2 executing:2 progress:1/2",
		},
		{
			name:  "previews while running, none before",
			steps: []step{preview(png), job(snapshot(storage.JobRunning, 1)), preview(png)},
			want:  "execution_start execution_cached binary1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFollower(jobID)
			var frames []Frame
			for _, s := range tc.steps {
				frames = append(frames, s(f)...)
				frames = append(frames, closing(f)...)
			}
			if got := summary(t, frames); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestPreviewFraming: ComfyUI's binary preview layouts.
func TestPreviewFraming(t *testing.T) {
	f := NewFollower(jobID)
	f.Job(snapshot(storage.JobRunning, 1))
	raw := json.RawMessage(`{"node_id":"7","content_type":"image/jpeg","data_base64":"/9j/"}`)
	plain := f.Preview(raw, false)[0].Binary
	if binary.BigEndian.Uint32(plain) != 1 || binary.BigEndian.Uint32(plain[4:]) != 1 || string(plain[8:]) != "\xff\xd8\xff" {
		t.Errorf("type 1 frame % x", plain)
	}
	meta := f.Preview(raw, true)[0].Binary
	n := binary.BigEndian.Uint32(meta[4:])
	var m map[string]any
	if binary.BigEndian.Uint32(meta) != 4 || json.Unmarshal(meta[8:8+n], &m) != nil ||
		m["node_id"] != "7" || m["prompt_id"] != jobID || m["image_type"] != "image/jpeg" || string(meta[8+n:]) != "\xff\xd8\xff" {
		t.Errorf("type 4 frame % x (meta %v)", meta, m)
	}
}

// progressFrames renders the progress frames among frames as
// "value/max@node", in order.
func progressFrames(t *testing.T, frames []Frame) string {
	t.Helper()
	var parts []string
	for _, fr := range frames {
		var m struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if fr.Text == nil || json.Unmarshal(fr.Text, &m) != nil || m.Type != "progress" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%v/%v@%v", m.Data["value"], m.Data["max"], m.Data["node"]))
	}
	return strings.Join(parts, " ")
}

// TestFollowerProgress: each progress message names the node it is about,
// with that node's value: a sampler's steps, else the nodes done of the
// nodes to run, sent when that count rises. A node that starts after the
// previous one's end was reported (the ComfyUI-peer pool reports both,
// and the dispatcher's throttle lets both through when they are 250 ms or
// more apart) gets no second message with the count its predecessor's
// end already sent; no message repeats the one before.
func TestFollowerProgress(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
		want  string
	}{
		{
			name: "built-in pool: each node's start, with the nodes done before it",
			steps: []step{prog(progress("1", 0, 3)), prog(progress("2", 1, 3)), prog(progress("3", 2, 3)),
				prog(listed("", 3, 3, "1", "2", "3"))},
			want: "0/3@1 1/3@2 2/3@3 3/3@3",
		},
		{
			name: "peer pool, nodes far apart: each node's start and end snapshots",
			steps: []step{prog(progress("1", 0, 3)), prog(progress("1", 1, 3)), prog(progress("2", 1, 3)),
				prog(progress("2", 2, 3)), prog(progress("3", 2, 3)), prog(progress("3", 3, 3)),
				prog(listed("", 3, 3, "1", "2", "3"))},
			want: "0/3@1 1/3@1 2/3@2 3/3@3",
		},
		{
			name: "peer pool, a node's start repeated by a later read of the same snapshot",
			steps: []step{prog(progress("1", 0, 2)), prog(progress("1", 1, 2)), prog(progress("2", 1, 2)),
				prog(progress("2", 1, 2)), prog(progress("2", 2, 2))},
			want: "0/2@1 1/2@1 2/2@2",
		},
		{
			name: "no progress before a node is announced (the peer pool's snapshot after execution_cached)",
			steps: []step{prog(listed("", 0, 2)), prog(progress("1", 0, 2)), prog(progress("1", 1, 2)),
				prog(progress("2", 2, 2))},
			want: "0/2@1 1/2@1 2/2@2",
		},
		{
			name: "a sampler's steps, its end, then a node without steps",
			steps: []step{prog(progress("1", 0, 3)), prog(progress("2", 1, 3, 1, 3)), prog(progress("2", 1, 3, 2, 3)),
				prog(progress("2", 1, 3, 3, 3)), prog(progress("2", 2, 3, 3, 3)), prog(progress("3", 2, 3)),
				prog(listed("", 3, 3, "1", "2", "3"))},
			want: "0/3@1 1/3@2 2/3@2 3/3@2 2/3@3 3/3@3",
		},
		{
			name: "two samplers with as many steps: each step names its own node",
			steps: []step{prog(progress("1", 0, 2, 2, 2)), prog(progress("1", 1, 2, 2, 2)), prog(progress("2", 1, 2, 1, 2)),
				prog(progress("2", 1, 2, 2, 2))},
			want: "2/2@1 1/2@2 2/2@2",
		},
		{
			name: "a snapshot of a node that is over, read after the next node's, says nothing",
			steps: []step{prog(progress("1", 0, 2, 1, 4)), prog(progress("2", 1, 2)), prog(progress("1", 1, 2, 2, 4)),
				prog(progress("2", 1, 2, 1, 9))},
			want: "1/4@1 1/2@2 1/9@2",
		},
		{
			name: "a follower that starts mid-run: the progress names the node running",
			steps: []step{prog(listed("3", 2, 4, "1", "2", "3")), prog(listed("3", 3, 4, "1", "2", "3")),
				prog(listed("4", 3, 4, "1", "2", "3", "4"))},
			want: "2/4@3 3/4@3",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFollower(jobID)
			frames := f.Job(snapshot(storage.JobRunning, 1))
			for _, s := range tc.steps {
				frames = append(frames, s(f)...)
			}
			if got := progressFrames(t, frames); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestFollowerJoin: a socket that connects while its client id's prompt
// is queued or runs gets nothing of what happened before it, the running
// node's executing again, then the rest of the prompt, each once.
func TestFollowerJoin(t *testing.T) {
	running := func(node string, done int, started []string, outs ...storage.Output) storage.Job {
		j := snapshot(storage.JobRunning, 1, outs...)
		j.Progress = listed(node, done, 3, started...)
		return j
	}
	succeeded := snapshot(storage.JobSucceeded, 1, output("3", "a1", "x.png"))
	tests := []struct {
		name  string
		join  storage.Job
		steps []step
		want  string
	}{
		{
			name: "mid-run: the running node again, then the rest",
			join: running("2", 1, []string{"1", "2"}),
			steps: []step{prog(listed("2", 1, 3, "1", "2")), prog(listed("3", 2, 3, "1", "2", "3")),
				out(output("3", "a1", "x.png")), job(succeeded)},
			want: "executing:2 executing:3 progress:2/3 executed:3×1 execution_success status executing:<nil>",
		},
		{
			name:  "the running node's outputs, committed before the socket came, are sent when it is over",
			join:  running("3", 2, []string{"1", "2", "3"}, output("3", "a1", "x.png")),
			steps: []step{job(succeeded)},
			want:  "executing:3 executed:3×1 execution_success status executing:<nil>",
		},
		{
			name:  "queued: the whole prompt",
			join:  snapshot(storage.JobQueued, 0),
			steps: []step{job(running("1", 0, []string{"1"})), job(succeeded)},
			want:  "execution_start execution_cached executing:1 progress:0/3 executing:3 executed:3×1 execution_success status executing:<nil>",
		},
		{
			name:  "started, no node yet: nothing until the first",
			join:  snapshot(storage.JobRunning, 1),
			steps: []step{prog(listed("1", 0, 3, "1"))},
			want:  "executing:1 progress:0/3",
		},
		{
			name: "ended meanwhile: its result",
			join: succeeded,
			want: "execution_success status executing:<nil>",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFollower(jobID)
			frames := append(f.Join(tc.join), closing(f)...)
			for _, s := range tc.steps {
				frames = append(frames, s(f)...)
				frames = append(frames, closing(f)...)
			}
			if got := summary(t, frames); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
