package nativeapi

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"time"

	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/storage"
)

// Frame is one WebSocket message: JSON text ({type, data}) or, for
// previews, binary in ComfyUI's framing.
type Frame struct {
	Text   []byte
	Binary []byte
}

// textFrame renders {type, data}.
func textFrame(typ string, data any) Frame {
	b, _ := json.Marshal(map[string]any{"type": typ, "data": data})
	return Frame{Text: b}
}

// StatusFrame is ComfyUI's status message. sid is set only on the first
// frame of a connection.
func StatusFrame(queueRemaining int, sid string) Frame {
	data := map[string]any{"status": map[string]any{"exec_info": map[string]any{"queue_remaining": queueRemaining}}}
	if sid != "" {
		data["sid"] = sid
	}
	return textFrame("status", data)
}

// FeatureFlagsFrame answers a client's feature_flags.
func FeatureFlagsFrame(maxUploadSize int64) Frame {
	return textFrame("feature_flags", map[string]any{"supports_preview_metadata": true, "max_upload_size": maxUploadSize})
}

// Follower turns one job's comfygate events (job snapshots read from
// storage, and the bus's progress, preview and output events) into the
// message sequence ComfyUI sends a prompt's client: execution_start,
// execution_cached, executing {node}, progress, executed (one per node with
// all its files), then execution_success / execution_error /
// execution_interrupted and executing {node: null}. Every input may come
// twice or late (the bus is best effort and snapshots repeat it); a
// Follower sends each thing once, and nothing after the end. It is not
// safe for concurrent use.
type Follower struct {
	jobID   string
	started bool
	attempt int
	node    string
	sent    map[string]bool // output asset ids already taken in
	// pending are outputs not yet sent as executed, by node in order.
	pending  map[string][]storage.Output
	order    []string
	executed []string // nodes whose outputs were sent
	// ran are the nodes that finished, in order: each node announced
	// before the one announced after it (ComfyUI's executed set).
	ran []string
	// lastProgress is the progress frame's data sent last; an equal one is
	// not sent again.
	lastProgress [3]any
	// countSent is the highest nodes done sent as a progress value this
	// attempt (-1: none): a count goes out once, with the node whose
	// snapshot first carried it, not again with the next node's start.
	countSent int
	// nodesDone is the highest nodes_done seen this attempt: a progress
	// event below it was overtaken by a snapshot read after it.
	nodesDone int
	// listed is how much of the job's NodesStarted has been taken in
	// this attempt.
	listed int
	done   bool
	// closing is the prompt's last message (executing null), held by Job
	// for Closing: ComfyUI sends the queue's status between the result and
	// it.
	closing []Frame
	now     func() time.Time
}

// NewFollower follows job id.
func NewFollower(jobID string) *Follower {
	return &Follower{jobID: jobID, sent: map[string]bool{}, pending: map[string][]storage.Output{}, countSent: -1, now: time.Now}
}

// Done reports whether the job's end has been sent.
func (f *Follower) Done() bool { return f.done }

func (f *Follower) timestamp() int64 { return f.now().UnixMilli() }

// start sends execution_start and execution_cached once per attempt.
// comfygate caches no node results, so the cached list is always empty.
// attempt is the job's attempt when known (a snapshot), 0 otherwise. A
// later attempt (the job was handed to another worker) starts over; its
// predecessor's uncommitted outputs are gone from the job.
func (f *Follower) start(attempt int) []Frame {
	switch {
	case !f.started:
	case attempt > f.attempt && f.attempt > 0:
		f.pending, f.order, f.nodesDone = map[string][]storage.Output{}, nil, 0
		f.ran, f.lastProgress, f.countSent, f.listed = nil, [3]any{}, -1, 0
	default:
		f.attempt = max(f.attempt, attempt)
		return nil
	}
	f.started, f.attempt, f.node = true, attempt, ""
	ts := f.timestamp()
	return []Frame{
		textFrame("execution_start", map[string]any{"prompt_id": f.jobID, "timestamp": ts}),
		textFrame("execution_cached", map[string]any{"nodes": []string{}, "prompt_id": f.jobID, "timestamp": ts}),
	}
}

// Running takes the news that the job started running: execution_start
// and execution_cached, once.
func (f *Follower) Running() []Frame {
	if f.done {
		return nil
	}
	return f.start(0)
}

// executing announces the node running now.
func (f *Follower) executing(node string) []Frame {
	if node == "" || node == f.node {
		return nil
	}
	if f.node != "" && !slices.Contains(f.ran, f.node) {
		f.ran = append(f.ran, f.node)
	}
	f.node = node
	return []Frame{textFrame("executing", map[string]any{"node": node, "display_node": node, "prompt_id": f.jobID})}
}

// flush sends executed for every node with pending outputs except keep.
func (f *Follower) flush(keep string) []Frame {
	var out []Frame
	kept := f.order[:0]
	for _, node := range f.order {
		if node == keep {
			kept = append(kept, node)
			continue
		}
		ui, _ := OutputsOf(f.pending[node])
		delete(f.pending, node)
		f.executed = append(f.executed, node)
		out = append(out, textFrame("executed", map[string]any{
			"node": node, "display_node": node, "output": ui[node], "prompt_id": f.jobID}))
	}
	f.order = kept
	return out
}

// Job takes a snapshot of the job read from storage.
func (f *Follower) Job(j storage.Job) []Frame {
	if f.done {
		return nil
	}
	var out []Frame
	switch j.Status {
	case storage.JobQueued:
		return nil
	case storage.JobRunning, storage.JobCanceling:
		out = append(out, f.start(j.Attempt)...)
		return append(out, f.snapshot(j)...)
	}
	// Terminal.
	if !f.started && j.StartedAt == nil {
		f.done = true // never ran (canceled while queued): ComfyUI sends nothing for it
		return nil
	}
	out = append(out, f.start(j.Attempt)...)
	out = append(out, f.snapshot(j)...) // the last snapshot, for a client that saw none
	out = append(out, f.flush("")...)
	ts := f.timestamp()
	switch j.Status {
	case storage.JobSucceeded:
		out = append(out, textFrame("execution_success", map[string]any{"prompt_id": f.jobID, "timestamp": ts}))
	case storage.JobCanceled:
		node, _ := runningNode(j)
		if node == "" {
			node = f.node
		}
		out = append(out, textFrame("execution_interrupted", interruptedData(j, node, f.ranBefore(j, node), ts)))
	default:
		out = append(out, textFrame("execution_error", executionErrorData(j, f.ranBefore(j, failedNode(j)), ts)))
	}
	f.done = true
	f.closing = []Frame{textFrame("executing", map[string]any{"node": nil, "display_node": nil, "prompt_id": f.jobID})}
	return out
}

// Closing returns, once, the prompt's last message (executing null) after
// Job took its end. ComfyUI ends a prompt with its result
// (execution_success, _error or _interrupted), then the queue's status
// (the prompt left the queue), then executing null: the caller sends the
// status between Job's frames and these.
func (f *Follower) Closing() []Frame {
	out := f.closing
	f.closing = nil
	return out
}

// Join takes the job as a socket that connects while it is queued or runs
// sees it: nothing of what happened before (ComfyUI routes each message to
// the client id's socket of the moment it is sent), only, when a node
// runs, its executing again (ComfyUI re-sends the running node to a
// client id that reconnects). What follows is the rest of the prompt, as
// usual. A job that ended meanwhile gives its result (and Closing).
func (f *Follower) Join(j storage.Job) []Frame {
	frames := f.Job(j)
	if f.done {
		if len(frames) == 0 {
			return nil
		}
		return frames[len(frames)-1:]
	}
	if f.node == "" {
		return nil
	}
	// prompt_id, which ComfyUI's message lacks: the front may run several
	// prompts of one client id at once, and the client must know which.
	return []Frame{textFrame("executing", map[string]any{"node": f.node, "display_node": f.node, "prompt_id": f.jobID})}
}

// ranBefore is what the job's record says ran before node, with the
// nodes this follower saw finish.
func (f *Follower) ranBefore(j storage.Job, node string) []string {
	ran := RanBefore(j, node)
	for _, id := range f.ran {
		if id != node && !slices.Contains(ran, id) {
			ran = append(ran, id)
		}
	}
	return ran
}

// snapshot takes a stored job's progress and outputs as they happened:
// each node's outputs right after its executing (so its executed comes
// before the next node's executing, as ComfyUI sends them), then the
// outputs of nodes the progress does not list.
func (f *Follower) snapshot(j storage.Job) []Frame {
	var out []Frame
	if len(j.Progress) > 0 {
		byNode := map[string][]storage.Output{}
		for _, o := range j.Outputs {
			byNode[o.NodeID] = append(byNode[o.NodeID], o)
		}
		out = f.progress(j.Progress, byNode)
	}
	for _, o := range j.Outputs {
		out = append(out, f.Output(o)...)
	}
	return out
}

// Progress takes a progress snapshot (jobs.Progress JSON). The node it
// names is announced with executing; progress carries that node and its
// step/steps when the executor reports them (a sampler), else the nodes
// done of the nodes to run when that count rises (see progressFrame).
func (f *Follower) Progress(raw json.RawMessage) []Frame {
	return f.progress(raw, nil)
}

// progress is Progress; outputs are the committed outputs by node, of a
// snapshot read from storage (nil for a bus event).
//
// Nodes the snapshot lists as started (NodesStarted) that this follower
// has not taken in yet are announced first, in order, each with its
// outputs. That is how a follower that starts late catches up: a socket
// on another gateway process follows a prompt from its announcement, sent
// once POST /prompt has answered, and the prompt may have run nodes by
// then (a local socket is subscribed before the prompt exists, see
// Session.hold). Storage, not the bus, carries the list, so the catch-up
// holds whichever process ran the prompt, whichever executor (built-in
// or ComfyUI peer: the list is the order the executor reported, not one
// recomputed from the graph), and after lost events. A pre-announcement
// on the bus before the job is created would still race with the remote
// session's subscription to the job's events, so it could not replace
// this. A node already announced is never announced again.
func (f *Follower) progress(raw json.RawMessage, outputs map[string][]storage.Output) []Frame {
	if f.done {
		return nil
	}
	var p jobs.Progress
	if json.Unmarshal(raw, &p) != nil || p.NodesDone < f.nodesDone {
		return nil
	}
	f.nodesDone = p.NodesDone
	out := f.start(0)
	for ; f.listed < len(p.NodesStarted); f.listed++ {
		node := p.NodesStarted[f.listed]
		if node == "" || node == f.node || slices.Contains(f.ran, node) {
			continue
		}
		out = append(out, f.flush(node)...)
		out = append(out, f.executing(node)...)
		for _, o := range outputs[node] {
			out = append(out, f.Output(o)...)
		}
	}
	node := ""
	if p.CurrentNode != nil {
		node = *p.CurrentNode
	}
	if node != "" && node != f.node {
		if slices.Contains(f.ran, node) {
			// A snapshot of a node that is over, taken in after the
			// next node's (a storage read behind a bus event): its
			// node is not announced again, nor its step sent as the
			// running node's.
			return out
		}
		out = append(out, f.flush(node)...)
		out = append(out, f.executing(node)...)
	}
	return append(out, f.progressFrame(p)...)
}

// progressFrame is the snapshot's progress message, about the node
// running (the last one announced, for the last snapshot, which names
// none; none before a node is announced, as the peer pool's snapshot
// after execution_cached): the node's step/steps when the executor
// reports them, else the nodes done of the nodes to run, only when that
// count rises. ComfyUI sends progress only from a node's own progress
// bar, with that node; a count sent again with the next node's start
// would read, to a client that draws each node's progress, as the next
// node being that far along already (the ComfyUI-peer pool reports a
// node's end and the next one's start as two snapshots with the same
// count, both stored when they are 250 ms or more apart).
func (f *Follower) progressFrame(p jobs.Progress) []Frame {
	value, maxValue := p.NodesDone, p.NodesTotal
	steps := p.Step != nil && p.Steps != nil && *p.Steps > 0
	if steps {
		value, maxValue = *p.Step, *p.Steps
	}
	sent := [3]any{value, maxValue, f.node}
	if f.node == "" || maxValue <= 0 || sent == f.lastProgress || !steps && p.NodesDone <= f.countSent {
		return nil
	}
	if !steps {
		f.countSent = p.NodesDone
	}
	f.lastProgress = sent
	return []Frame{textFrame("progress", map[string]any{"value": value, "max": maxValue, "prompt_id": f.jobID, "node": nullable(f.node)})}
}

// Output takes a committed output; it is sent with its node's others as
// one executed message once the node is over.
func (f *Follower) Output(o storage.Output) []Frame {
	if f.done || f.sent[o.Asset.ID] {
		return nil
	}
	f.sent[o.Asset.ID] = true
	out := f.start(0)
	// A node that ran before the current one (its outputs come late) is
	// not announced again; they go out with the next flush.
	if o.NodeID != f.node && !slices.Contains(f.ran, o.NodeID) {
		out = append(out, f.flush(o.NodeID)...)
		out = append(out, f.executing(o.NodeID)...)
	}
	if _, ok := f.pending[o.NodeID]; !ok {
		f.order = append(f.order, o.NodeID)
	}
	f.pending[o.NodeID] = append(f.pending[o.NodeID], o)
	return out
}

// Preview takes a live preview event ({node_id, content_type,
// data_base64}) and frames it as ComfyUI does: type 1 (u32 image type, then
// the image), or type 4 with its metadata for a client that announced
// supports_preview_metadata.
func (f *Follower) Preview(raw json.RawMessage, withMetadata bool) []Frame {
	if f.done || !f.started {
		return nil
	}
	var p struct {
		NodeID      string `json:"node_id"`
		ContentType string `json:"content_type"`
		// Decoded from base64 by encoding/json itself: a preview of a
		// large image is megabytes, and its base64 text need not be kept
		// as a string too.
		Data []byte `json:"data_base64"`
	}
	if json.Unmarshal(raw, &p) != nil || len(p.Data) == 0 {
		return nil
	}
	if p.ContentType == "" {
		p.ContentType = "image/png"
	}
	var head []byte
	if withMetadata {
		node := p.NodeID
		if node == "" {
			node = f.node
		}
		meta, _ := json.Marshal(map[string]any{"node_id": node, "prompt_id": f.jobID, "display_node_id": node,
			"parent_node_id": nil, "real_node_id": node, "image_type": p.ContentType})
		head = binary.BigEndian.AppendUint32(nil, 4)
		head = binary.BigEndian.AppendUint32(head, uint32(len(meta)))
		head = append(head, meta...)
	} else {
		imageType := uint32(2)
		if p.ContentType == "image/jpeg" {
			imageType = 1
		}
		head = binary.BigEndian.AppendUint32(nil, 1)
		head = binary.BigEndian.AppendUint32(head, imageType)
	}
	frame := make([]byte, 0, len(head)+len(p.Data))
	return []Frame{{Binary: append(append(frame, head...), p.Data...)}}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
