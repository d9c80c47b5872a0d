package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
)

// Progress is the contract's progress snapshot.
type Progress struct {
	Value            float64 `json:"value"`
	NodesDone        int     `json:"nodes_done"`
	NodesTotal       int     `json:"nodes_total"`
	CurrentNode      *string `json:"current_node"`
	CurrentNodeClass *string `json:"current_node_class"`
	Step             *int    `json:"step"`
	Steps            *int    `json:"steps"`
	Message          *string `json:"message"`
	// NodesStarted are the nodes this attempt has started so far, each
	// once, in the order they started (the current node last while one
	// runs). The dispatcher fills it from the snapshots the executor
	// reports, whichever executor it is, so that storage holds the order
	// the nodes ran in: a follower that starts from a snapshot mid-run
	// (a ComfyUI socket on another gateway process, which learns of the
	// prompt only after it started) announces the nodes it missed, in
	// order, instead of skipping them.
	NodesStarted []string `json:"nodes_started,omitempty"`
}

// OutputFile is a file an executor produced, to be committed as an asset.
type OutputFile struct {
	NodeID string
	// Name is the file name the node gave it.
	Name string
	// Subfolder is where the node put it, relative to the job.
	Subfolder string
	// Type is the normalised kind: image, video, audio, text, file or latent.
	Type string
	// Folder is the ComfyUI folder type the node wrote the file to
	// ("output", "temp"); "" when there is none (a text output).
	Folder      string
	ContentType string
	// Open returns the bytes; it is called once.
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// Run is one attempt of one job, handed to an executor.
type Run struct {
	Job storage.Job
	// Graph is the job's workflow.
	Graph workflow.Graph
	// ExtraData is the job's extra_data when this process still holds it.
	ExtraData map[string]string
	// OpenAsset opens one of the job's account's assets by id (core/ASSET)
	// or by file path (a plain file name).
	OpenAsset func(ctx context.Context, assetID, fileName string) (storage.Asset, io.ReadCloser, error)
	// Progress records a progress snapshot.
	Progress func(ctx context.Context, p Progress)
	// Preview offers a live preview image (throttled by the dispatcher).
	Preview func(nodeID, contentType string, data []byte)
	// Output commits an output the moment it exists.
	Output func(ctx context.Context, f OutputFile) error
	// Log receives what the run prints, for jobs of serverless
	// deployments; nil (which discards writes) for every other job.
	Log *RunLog
}

// Executor runs attempts of jobs for one pool.
type Executor interface {
	// Catalog returns the pool's node catalog, in /object_info form.
	Catalog(ctx context.Context) (workflow.Catalog, error)
	// Execute runs the attempt. It returns nil on success, ctx's error when
	// ctx ends, a *NodeError when the workflow failed, and any other error
	// for a failure of the executor itself.
	Execute(ctx context.Context, run *Run) error
}

// WorkerLostError means the attempt's worker stopped answering or lost the
// job. The dispatcher hands the job back at once for another worker, until
// the job has had its maximum attempts; then it fails with worker_lost.
type WorkerLostError struct{ Err error }

func (e *WorkerLostError) Error() string { return "worker lost: " + e.Err.Error() }

// Unwrap exposes the cause.
func (e *WorkerLostError) Unwrap() error { return e.Err }

// NodeError is a workflow failure: the job.error the caller sees.
type NodeError struct {
	// Code is the job.error code, node_execution_error by default.
	Code      string
	Message   string
	NodeID    string
	ClassType string
	Traceback string
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("node %s (%s): %s", e.NodeID, e.ClassType, e.Message)
}

// JSON renders the job.error object.
func (e *NodeError) JSON() json.RawMessage {
	code := e.Code
	if code == "" {
		code = "node_execution_error"
	}
	b, _ := json.Marshal(jobError{Code: code, Message: e.Message, NodeID: nullable(e.NodeID),
		ClassType: nullable(e.ClassType), Traceback: nullable(e.Traceback)})
	return b
}

// jobError is the contract's JobError.
type jobError struct {
	Code      string  `json:"code"`
	Message   string  `json:"message"`
	NodeID    *string `json:"node_id"`
	ClassType *string `json:"class_type"`
	Traceback *string `json:"traceback"`
}

// ErrorJSON renders a job.error with no node.
func ErrorJSON(code, message string) json.RawMessage {
	b, _ := json.Marshal(jobError{Code: code, Message: message})
	return b
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
