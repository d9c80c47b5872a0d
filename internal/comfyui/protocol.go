package comfyui

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/comfygate/comfygate/internal/jobs"
)

// fileRef is a file-like entry of a node's ui output.
type fileRef struct {
	Filename  string `json:"filename"`
	Subfolder string `json:"subfolder"`
	Type      string `json:"type"`
}

// outputItem is one output found in an `executed` event or a history
// entry: a file on the worker, or a plain string (a text output).
type outputItem struct {
	NodeID string
	Key    string
	File   *fileRef
	Text   string
	Index  int
}

// dedupeKey identifies an output so that the same file, seen in an
// `executed` event, again for a cached node and again in /history, is
// committed once.
func (o outputItem) dedupeKey() string {
	if o.File != nil {
		return "file\x00" + o.File.Type + "\x00" + o.File.Subfolder + "\x00" + o.File.Filename
	}
	sum := sha256.Sum256([]byte(o.Text))
	return fmt.Sprintf("text\x00%s\x00%s\x00%d\x00%s", o.NodeID, o.Key, o.Index, hex.EncodeToString(sum[:8]))
}

// outputItems collects every list entry with a filename under every key of
// a ui dict, and the plain strings under `text`. Keys are visited in sorted
// order so that commits are deterministic.
func outputItems(nodeID string, ui map[string]json.RawMessage) []outputItem {
	keys := make([]string, 0, len(ui))
	for k := range ui {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var items []outputItem
	for _, key := range keys {
		var list []json.RawMessage
		if json.Unmarshal(ui[key], &list) != nil {
			continue
		}
		for i, raw := range list {
			var f fileRef
			if json.Unmarshal(raw, &f) == nil && f.Filename != "" {
				if f.Type == "" {
					f.Type = "output"
				}
				items = append(items, outputItem{NodeID: nodeID, Key: key, File: &f, Index: i})
				continue
			}
			var s string
			if key == "text" && json.Unmarshal(raw, &s) == nil {
				items = append(items, outputItem{NodeID: nodeID, Key: key, Text: s, Index: i})
			}
		}
	}
	return items
}

// extKinds maps file extensions to the normalised output types.
var extKinds = map[string]string{
	".png": "image", ".jpg": "image", ".jpeg": "image", ".webp": "image", ".gif": "image",
	".bmp": "image", ".tif": "image", ".tiff": "image", ".avif": "image",
	".mp4": "video", ".webm": "video", ".mov": "video", ".mkv": "video", ".avi": "video", ".m4v": "video",
	".mp3": "audio", ".wav": "audio", ".flac": "audio", ".ogg": "audio", ".opus": "audio", ".m4a": "audio", ".aac": "audio",
	".txt": "text", ".json": "text", ".md": "text", ".csv": "text",
	".latent": "latent",
}

// keyKinds maps ui-dict keys to output types, for files whose extension
// says nothing.
var keyKinds = map[string]string{
	"images": "image", "gifs": "video", "video": "video", "videos": "video",
	"audio": "audio", "text": "text", "latents": "latent", "latent": "latent",
}

// extTypes fills in content types that minimal systems' mime tables lack.
var extTypes = map[string]string{
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp", ".gif": "image/gif",
	".mp4": "video/mp4", ".webm": "video/webm", ".mov": "video/quicktime", ".mkv": "video/x-matroska",
	".mp3": "audio/mpeg", ".wav": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg", ".opus": "audio/opus",
	".m4a": "audio/mp4", ".txt": "text/plain; charset=utf-8", ".json": "application/json",
}

// kindOf normalises an output to image, video, audio, text, file or latent:
// a known extension decides (ComfyUI's SaveVideo reports mp4 files under
// `images`), then the key, else file.
func kindOf(key, filename string) string {
	ext := strings.ToLower(path.Ext(filename))
	if k, ok := extKinds[ext]; ok {
		return k
	}
	if k, ok := keyKinds[key]; ok {
		return k
	}
	return "file"
}

func contentTypeOf(filename string) string {
	ext := strings.ToLower(path.Ext(filename))
	if t, ok := extTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}

// promptAnswer is POST /prompt's answer, 200 or 400.
type promptAnswer struct {
	PromptID   string                   `json:"prompt_id"`
	Error      json.RawMessage          `json:"error"`
	NodeErrors map[string]nodeErrorInfo `json:"node_errors"`
}

type nodeErrorInfo struct {
	Errors    []comfyError `json:"errors"`
	ClassType string       `json:"class_type"`
}

type comfyError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Details string `json:"details"`
}

// validationError turns a refused prompt into the job's error: code
// invalid_workflow, carrying the first node error (in node id order) or,
// without node errors, the top-level error.
func validationError(ans promptAnswer) *jobs.NodeError {
	if len(ans.NodeErrors) > 0 {
		id := slices.Min(slices.Collect(maps.Keys(ans.NodeErrors)))
		ne := ans.NodeErrors[id]
		msg := "the worker refused the workflow"
		if len(ne.Errors) > 0 {
			msg = joinMessage(ne.Errors[0])
		}
		return &jobs.NodeError{Code: "invalid_workflow", Message: msg, NodeID: id, ClassType: ne.ClassType}
	}
	var top comfyError
	if json.Unmarshal(ans.Error, &top) != nil || top.Message == "" {
		var s string
		_ = json.Unmarshal(ans.Error, &s)
		top.Message = s
	}
	if top.Message == "" {
		top.Message = "the worker refused the workflow"
	}
	return &jobs.NodeError{Code: "invalid_workflow", Message: joinMessage(top)}
}

func joinMessage(e comfyError) string {
	if e.Details == "" {
		return e.Message
	}
	return e.Message + ": " + e.Details
}

// executionError is an execution_error event's data.
type executionError struct {
	PromptID         string   `json:"prompt_id"`
	NodeID           string   `json:"node_id"`
	NodeType         string   `json:"node_type"`
	ExceptionMessage string   `json:"exception_message"`
	ExceptionType    string   `json:"exception_type"`
	Traceback        []string `json:"traceback"`
}

func (e executionError) nodeError() *jobs.NodeError {
	msg := strings.TrimSpace(e.ExceptionMessage)
	if msg == "" {
		msg = e.ExceptionType
	}
	if msg == "" {
		msg = "the node failed"
	}
	return &jobs.NodeError{Code: "node_execution_error", Message: msg, NodeID: e.NodeID,
		ClassType: e.NodeType, Traceback: strings.Join(e.Traceback, "")}
}

// historyFailure reads the failure recorded in a history entry's messages.
func historyFailure(h *historyEntry) *jobs.NodeError {
	for _, m := range h.Status.Messages {
		if len(m) < 2 {
			continue
		}
		var name string
		_ = json.Unmarshal(m[0], &name)
		switch name {
		case "execution_error":
			var e executionError
			_ = json.Unmarshal(m[1], &e)
			return e.nodeError()
		case "execution_interrupted":
			return &jobs.NodeError{Code: "node_execution_error", Message: "the worker interrupted the prompt"}
		}
	}
	return &jobs.NodeError{Code: "node_execution_error", Message: "the worker reported the prompt as failed"}
}
