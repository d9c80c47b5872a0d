package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/builtin"
	"github.com/comfygate/comfygate/internal/membudget"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
)

// BuiltinExecutor runs jobs on the built-in core image nodes, in process.
type BuiltinExecutor struct {
	// Memory is the process's budget for built-in jobs (shared by every
	// builtin pool); nil: unbounded.
	Memory *membudget.Budget
	// JobMemory bounds what one job holds at once (at most Memory's
	// size); 0: Memory's size.
	JobMemory int64

	once    sync.Once
	catalog workflow.Catalog
	err     error
}

// Catalog returns the built-in nodes in /object_info form.
func (b *BuiltinExecutor) Catalog(context.Context) (workflow.Catalog, error) {
	b.once.Do(func() { b.catalog, b.err = workflow.ParseObjectInfo(builtin.ObjectInfo()) })
	return b.catalog, b.err
}

// fraction is the share of the nodes done.
func fraction(p builtin.Progress) float64 {
	if p.NodesTotal == 0 {
		return 0
	}
	return float64(p.NodesDone) / float64(p.NodesTotal)
}

// Execute runs the attempt's graph. Into run.Log it prints what a ComfyUI
// server prints for a prompt — "got prompt", the exception of a failing
// node with its traceback, "Processing interrupted" on cancel and the
// "Prompt executed in" timing line — plus a line per node executed.
func (b *BuiltinExecutor) Execute(ctx context.Context, run *Run) error {
	start := time.Now()
	run.Log.Printf("got prompt")
	defer func() { run.Log.Printf("Prompt executed in %.2f seconds", time.Since(start).Seconds()) }()
	prompt, err := builtinPrompt(run.Graph)
	if err != nil {
		run.Log.Printf("invalid prompt: %v", err)
		return &NodeError{Message: err.Error()}
	}
	nodeStart := time.Now()
	err = builtin.Execute(ctx, prompt, builtin.Env{
		OpenInput: func(ctx context.Context, name string) (io.ReadCloser, error) {
			var a storage.Asset
			var rc io.ReadCloser
			var err error
			if id, ok := builtin.AssetID(name); ok {
				a, rc, err = run.OpenAsset(ctx, id, "")
			} else {
				a, rc, err = run.OpenAsset(ctx, "", name)
			}
			if errors.Is(err, storage.ErrNotFound) {
				// The job's message names the input, not the store.
				return nil, errors.New("no such file (was it deleted?)")
			}
			if err != nil {
				return nil, err
			}
			return sizedInput{ReadCloser: rc, size: a.SizeBytes}, nil
		},
		Memory:    b.Memory,
		JobMemory: b.JobMemory,
		OnMemoryWait: func(need int64) {
			run.Log.Printf("waiting for %s of the built-in executor's memory, which other jobs hold", humanize.IBytes(uint64(need)))
		},
		PromptJSON: run.Job.Workflow,
		// The snapshot names the node running now (as ComfyUI's executing
		// does), so a cancel reports the node it stopped; the last one,
		// after the last node, names none.
		OnStart: func(p builtin.Progress) {
			id, class := p.NodeID, p.ClassType
			run.Progress(ctx, Progress{Value: fraction(p), NodesDone: p.NodesDone, NodesTotal: p.NodesTotal,
				CurrentNode: &id, CurrentNodeClass: &class, Message: &class})
		},
		OnProgress: func(p builtin.Progress) {
			id, class := p.NodeID, p.ClassType
			run.Log.Printf("executed node %s (%s) in %.2f seconds", id, class, time.Since(nodeStart).Seconds())
			nodeStart = time.Now()
			if p.NodesDone == p.NodesTotal {
				run.Progress(ctx, Progress{Value: fraction(p), NodesDone: p.NodesDone, NodesTotal: p.NodesTotal})
			}
		},
		OnOutput: func(ctx context.Context, o builtin.Output) error {
			data := o.Data
			return run.Output(ctx, OutputFile{
				NodeID: o.NodeID, Name: o.Filename, Subfolder: o.Subfolder, Type: "image",
				Folder: o.Type, ContentType: o.ContentType,
				Open: func(context.Context) (io.ReadCloser, error) {
					return io.NopCloser(bytes.NewReader(data)), nil
				},
			})
		},
		JobPrefix: run.Job.ID,
	})
	var ne *builtin.NodeError
	switch {
	case errors.As(err, &ne):
		run.Log.Printf("!!! Exception during processing !!! %s", ne.Message)
		run.Log.Printf("Failed node %s (%s)", ne.NodeID, ne.ClassType)
		if ne.Traceback != "" {
			run.Log.Printf("Traceback (most recent call first):\n%s", ne.Traceback)
		}
		return &NodeError{Message: ne.Message, NodeID: ne.NodeID, ClassType: ne.ClassType, Traceback: ne.Traceback}
	case errors.Is(err, builtin.ErrNoOutputs):
		run.Log.Printf("Prompt has no outputs")
		return &NodeError{Code: "prompt_no_outputs", Message: "the workflow has no output node"}
	case err != nil && ctx.Err() != nil:
		run.Log.Printf("Processing interrupted")
	case err != nil:
		run.Log.Printf("!!! Exception during processing !!! %v", err)
	}
	return err
}

// sizedInput tells the executor an input's size, so that LoadImage reads
// it into one buffer of that size.
type sizedInput struct {
	io.ReadCloser
	size int64
}

func (s sizedInput) Size() int64 { return s.size }

// Precheck refuses, at submit, a workflow whose widgets alone make it need
// more memory than one job may hold (EmptyImage 8192×8192 with a batch):
// 422 invalid_workflow naming the node. What depends on an input file is
// charged when the job runs.
func (b *BuiltinExecutor) Precheck(_ context.Context, g workflow.Graph) error {
	prompt, err := builtinPrompt(g)
	if err != nil {
		return nil // Validate has judged the graph
	}
	limit := b.JobMemory
	if l := b.Memory.Limit(); l > 0 && (limit <= 0 || limit > l) {
		limit = l
	}
	if limit <= 0 {
		return nil
	}
	var me *builtin.MemoryError
	if err := builtin.CheckMemory(prompt, limit); errors.As(err, &me) {
		return apierr.InvalidWorkflow(fmt.Sprintf("node %s (%s): %s", me.NodeID, me.ClassType, me.Error())).
			WithDetails(map[string]any{"node_errors": workflow.NodeErrors{me.NodeID: {{
				Reason: workflow.ReasonOverMemoryLimit, Message: me.Error()}}}})
	}
	return nil
}

// builtinPrompt decodes the graph's inputs for the built-in executor and
// replaces core/ASSET objects by marked names its OpenInput resolves.
func builtinPrompt(g workflow.Graph) (map[string]builtin.Node, error) {
	prompt := make(map[string]builtin.Node, len(g))
	for id, n := range g {
		inputs := make(map[string]any, len(n.Inputs))
		for name, raw := range n.Inputs {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, err
			}
			if obj, ok := v.(map[string]any); ok && obj["__type"] == workflow.AssetType {
				info, _ := obj["info"].(map[string]any)
				assetID, _ := info["id"].(string)
				v = builtin.AssetInput(assetID)
			}
			inputs[name] = v
		}
		prompt[id] = builtin.Node{ClassType: n.ClassType, Inputs: inputs}
	}
	return prompt, nil
}

var _ Executor = (*BuiltinExecutor)(nil)
