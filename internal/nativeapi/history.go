package nativeapi

import (
	"cmp"
	"encoding/json"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
)

// FileRef is how ComfyUI names a file in a node's output and in /view:
// {filename, subfolder, type}.
type FileRef struct {
	Filename  string `json:"filename"`
	Subfolder string `json:"subfolder"`
	Type      string `json:"type"`
}

// Number is a job's place in ComfyUI's queue order: its creation time in
// milliseconds. ComfyUI counts prompts from 0; any increasing number keeps
// clients that sort by it right.
func Number(j storage.Job) int64 { return j.CreatedAt.UnixMilli() }

// QueueItem is ComfyUI's queue tuple [number, prompt_id, prompt,
// extra_data, outputs_to_execute], which /queue lists and /history repeats.
type QueueItem struct {
	Number   int64
	PromptID string
	Prompt   json.RawMessage
	// ExtraData holds client_id when the prompt named one; comfygate never
	// stores any other extra_data.
	ExtraData map[string]string
	Outputs   []string
}

// MarshalJSON renders the tuple as ComfyUI's list.
func (q QueueItem) MarshalJSON() ([]byte, error) {
	extra := q.ExtraData
	if extra == nil {
		extra = map[string]string{}
	}
	outputs := q.Outputs
	if outputs == nil {
		outputs = []string{}
	}
	prompt := q.Prompt
	if len(prompt) == 0 {
		prompt = json.RawMessage("{}")
	}
	return json.Marshal([]any{q.Number, q.PromptID, prompt, extra, outputs})
}

// QueueItemOf is a job's queue tuple. clientID is the prompt's WebSocket
// session ("" for a job submitted otherwise); outputs_to_execute lists the
// prompt's output nodes, as ComfyUI's does, from the start (see
// OutputNodes).
func QueueItemOf(j storage.Job, clientID string, cat workflow.Catalog) QueueItem {
	item := QueueItem{Number: Number(j), PromptID: j.ID, Prompt: j.Workflow}
	if clientID != "" {
		item.ExtraData = map[string]string{"client_id": clientID}
	}
	item.Outputs = OutputNodes(j, cat)
	return item
}

// OutputNodes lists a job's output nodes (the nodes of its workflow whose
// class the catalog marks output_node), in id order (numerically when ids
// are numbers): what ComfyUI runs the prompt for. Without a catalog (the
// pool's is unknown now) it falls back on the nodes that produced outputs.
func OutputNodes(j storage.Job, cat workflow.Catalog) []string {
	var ids []string
	if g, err := workflow.DecodeGraph(j.Workflow); err == nil && cat != nil {
		for id, n := range g {
			if cat[n.ClassType].OutputNode {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		_, ids = OutputsOf(j.Outputs)
	}
	slices.SortFunc(ids, compareIDs)
	return ids
}

// compareIDs orders node ids numerically when both are numbers, else as
// strings, numbers first.
func compareIDs(a, b string) int {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return cmp.Compare(x, y)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// OutputsOf groups a job's outputs by node in ComfyUI's ui shape
// ({node: {"images": [FileRef…]}}), with the nodes in the order their
// first output was committed.
func OutputsOf(outs []storage.Output) (map[string]map[string][]FileRef, []string) {
	byNode := map[string]map[string][]FileRef{}
	var order []string
	for _, o := range outs {
		ui, ok := byNode[o.NodeID]
		if !ok {
			ui = map[string][]FileRef{}
			byNode[o.NodeID] = ui
			order = append(order, o.NodeID)
		}
		key := uiKey(o.Type)
		ui[key] = append(ui[key], fileRefOf(o))
	}
	return byNode, order
}

// uiKey is the ui key ComfyUI's own nodes file an output kind under:
// images (SaveImage, PreviewImage, and video since SaveVideo), audio,
// text; anything else under files.
func uiKey(kind string) string {
	switch kind {
	case "image", "video":
		return "images"
	case "audio":
		return "audio"
	case "text":
		return "text"
	}
	return "files"
}

// fileRefOf names an output as /view serves it: the asset's file path,
// split (it starts with the job id, so names never collide across jobs),
// and the folder type the node wrote it to (previews are "temp", as
// ComfyUI reports them; clients tell previews from saved files by it).
func fileRefOf(o storage.Output) FileRef {
	dir := path.Dir(o.Asset.FilePath)
	if dir == "." {
		dir = ""
	}
	typ := o.Folder
	if typ == "" {
		typ = "output"
	}
	return FileRef{Filename: path.Base(o.Asset.FilePath), Subfolder: dir, Type: typ}
}

// HistoryEntry is one prompt of ComfyUI's /history.
type HistoryEntry struct {
	Prompt  QueueItem                       `json:"prompt"`
	Outputs map[string]map[string][]FileRef `json:"outputs"`
	Status  HistoryStatus                   `json:"status"`
	Meta    map[string]NodeMeta             `json:"meta"`
}

// HistoryStatus is a history entry's status.
type HistoryStatus struct {
	StatusStr string `json:"status_str"`
	Completed bool   `json:"completed"`
	// Messages are [event, data] pairs of the execution.
	Messages [][2]any `json:"messages"`
}

// NodeMeta is a history entry's meta for one output node.
type NodeMeta struct {
	NodeID      string  `json:"node_id"`
	DisplayNode string  `json:"display_node"`
	ParentNode  *string `json:"parent_node"`
	RealNodeID  string  `json:"real_node_id"`
}

// InHistory reports whether a job belongs in /history: it ran to an end
// (succeeded, failed or canceled). Expired jobs have lost their outputs and
// leave the history as they leave retention.
func InHistory(j storage.Job) bool {
	switch j.Status {
	case storage.JobSucceeded, storage.JobFailed, storage.JobCanceled:
		return true
	}
	return false
}

// HistoryOf is a finished job's history entry; cat is the pool's catalog
// (nil when unknown).
func HistoryOf(j storage.Job, clientID string, cat workflow.Catalog) HistoryEntry {
	outputs, order := OutputsOf(j.Outputs)
	meta := make(map[string]NodeMeta, len(order))
	for _, id := range order {
		meta[id] = NodeMeta{NodeID: id, DisplayNode: id, RealNodeID: id}
	}
	e := HistoryEntry{Prompt: QueueItemOf(j, clientID, cat), Outputs: outputs, Meta: meta}
	e.Status.Messages = [][2]any{}
	if j.StartedAt != nil {
		at := millis(*j.StartedAt)
		e.Status.Messages = append(e.Status.Messages,
			[2]any{"execution_start", map[string]any{"prompt_id": j.ID, "timestamp": at}},
			[2]any{"execution_cached", map[string]any{"nodes": []string{}, "prompt_id": j.ID, "timestamp": at}})
	}
	end := millis(j.CreatedAt)
	if j.CompletedAt != nil {
		end = millis(*j.CompletedAt)
	}
	switch j.Status {
	case storage.JobSucceeded:
		e.Status.StatusStr, e.Status.Completed = "success", true
		e.Status.Messages = append(e.Status.Messages,
			[2]any{"execution_success", map[string]any{"prompt_id": j.ID, "timestamp": end}})
	case storage.JobCanceled:
		e.Status.StatusStr = "error"
		if j.StartedAt != nil {
			node, _ := runningNode(j)
			e.Status.Messages = append(e.Status.Messages,
				[2]any{"execution_interrupted", interruptedData(j, node, RanBefore(j, node), end)})
		}
	default:
		e.Status.StatusStr = "error"
		e.Status.Messages = append(e.Status.Messages, [2]any{"execution_error", executionErrorData(j, RanBefore(j, failedNode(j)), end)})
	}
	return e
}

// jobError is the part of a job.error the native messages read.
type jobError struct {
	Code      string  `json:"code"`
	Message   string  `json:"message"`
	NodeID    *string `json:"node_id"`
	ClassType *string `json:"class_type"`
	Traceback *string `json:"traceback"`
}

// executionErrorData is ComfyUI's execution_error for a failed (or
// expired) job. exception_type carries comfygate's error code.
func executionErrorData(j storage.Job, executed []string, at int64) map[string]any {
	var je jobError
	_ = json.Unmarshal(j.Error, &je)
	if je.Code == "" {
		je.Code, je.Message = j.Status, "the job ended with status "+j.Status
	}
	node, class := "", ""
	if je.NodeID != nil {
		node = *je.NodeID
	}
	if je.ClassType != nil {
		class = *je.ClassType
	}
	traceback := []string{}
	if je.Traceback != nil {
		traceback = Frames(*je.Traceback)
	}
	if executed == nil {
		executed = []string{}
	}
	return map[string]any{
		"prompt_id": j.ID, "node_id": node, "node_type": class, "executed": executed,
		"exception_message": je.Message, "exception_type": je.Code, "traceback": traceback,
		"current_inputs": map[string]any{}, "current_outputs": map[string]any{}, "timestamp": at,
	}
}

// Frames splits a traceback stored as one text back into ComfyUI's list
// of frames: a ComfyUI worker's traceback is Python's formatted frames
// joined, each beginning with `  File "`. Other text (the built-in
// executor's) is one frame; none is an empty list.
func Frames(tb string) []string {
	frames := []string{}
	const start = "  File \""
	for tb != "" {
		next := strings.Index(tb[1:], "\n"+start)
		if !strings.HasPrefix(tb, start) || next < 0 {
			return append(frames, tb)
		}
		frames = append(frames, tb[:next+2])
		tb = tb[next+2:]
	}
	return frames
}

// runningNode is the node the job's last progress snapshot names as
// running, and its class ("" when none).
func runningNode(j storage.Job) (node, class string) {
	var p struct {
		CurrentNode      *string `json:"current_node"`
		CurrentNodeClass *string `json:"current_node_class"`
	}
	if json.Unmarshal(j.Progress, &p) == nil && p.CurrentNode != nil {
		node = *p.CurrentNode
		if p.CurrentNodeClass != nil {
			class = *p.CurrentNodeClass
		}
	}
	return node, class
}

// failedNode is the node a failed job's error names ("" when none).
func failedNode(j storage.Job) string {
	var je jobError
	if json.Unmarshal(j.Error, &je) == nil && je.NodeID != nil {
		return *je.NodeID
	}
	return ""
}

// RanBefore lists the nodes known to have run before node stopped the
// job: every node node reads from, directly or not (the executor ran
// them first), and every node that committed an output; node itself is
// not among them. Ids are in id order (ComfyUI sends a set).
func RanBefore(j storage.Job, node string) []string {
	seen := map[string]bool{}
	var ran []string
	add := func(id string) {
		if id != node && !seen[id] {
			seen[id] = true
			ran = append(ran, id)
		}
	}
	if g, err := workflow.DecodeGraph(j.Workflow); err == nil && node != "" {
		var visit func(id string)
		visit = func(id string) {
			n, ok := g[id]
			if !ok {
				return
			}
			for _, raw := range n.Inputs {
				if l, ok := workflow.ParseLink(raw); ok && !seen[l.Node] && l.Node != node {
					add(l.Node)
					visit(l.Node)
				}
			}
		}
		visit(node)
	}
	for _, o := range j.Outputs {
		add(o.NodeID)
	}
	slices.SortFunc(ran, compareIDs)
	if ran == nil {
		ran = []string{}
	}
	return ran
}

// interruptedData is ComfyUI's execution_interrupted for a canceled job:
// the node that was running (node) and the nodes done before it.
func interruptedData(j storage.Job, node string, executed []string, at int64) map[string]any {
	class := ""
	if running, c := runningNode(j); running == node {
		class = c
	}
	if class == "" && node != "" {
		if g, err := workflow.DecodeGraph(j.Workflow); err == nil {
			class = g[node].ClassType
		}
	}
	if executed == nil {
		executed = []string{}
	}
	return map[string]any{"prompt_id": j.ID, "node_id": node, "node_type": class, "executed": executed, "timestamp": at}
}

func millis(t time.Time) int64 { return t.UnixMilli() }

// History is an ordered /history answer: prompt id → entry, oldest first
// as ComfyUI lists it.
type History []HistoryItem

// HistoryItem is one member of a History.
type HistoryItem struct {
	ID    string
	Entry HistoryEntry
}

// MarshalJSON renders the object with its members in order.
func (h History) MarshalJSON() ([]byte, error) {
	buf := []byte{'{'}
	for i, it := range h {
		if i > 0 {
			buf = append(buf, ',')
		}
		k, err := json.Marshal(it.ID)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(it.Entry)
		if err != nil {
			return nil, err
		}
		buf = append(append(append(buf, k...), ':'), v...)
	}
	return append(buf, '}'), nil
}
