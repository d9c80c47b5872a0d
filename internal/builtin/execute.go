package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strconv"

	"github.com/comfygate/comfygate/internal/membudget"
)

// Node is one entry of an API-format prompt. A linked input is
// []any{"<node id>", float64(slot)} as encoding/json decodes it; any other
// value is a widget value.
type Node struct {
	ClassType string
	Inputs    map[string]any
}

// Env is what a run needs from its caller.
type Env struct {
	// OpenInput opens the file a LoadImage `image` value names (the gateway
	// resolves it to one of the caller's assets).
	OpenInput func(ctx context.Context, name string) (io.ReadCloser, error)
	// PromptJSON is written verbatim (non-ASCII escaped) into the `prompt`
	// tEXt chunk of saved PNGs; nil writes no prompt chunk.
	PromptJSON []byte
	// ExtraPNGInfo entries (normally {"workflow": ...}) become one tEXt
	// chunk each, keyed by the entry name, the value JSON-encoded.
	ExtraPNGInfo map[string]any
	// OnStart, if set, is called before every node, with NodesDone the
	// nodes finished so far.
	OnStart func(Progress)
	// OnProgress, if set, is called after every node.
	OnProgress func(Progress)
	// OnOutput is called as soon as an output file exists, before the run
	// continues; an error from it aborts the run with that error.
	OnOutput func(ctx context.Context, o Output) error
	// JobPrefix, if set, is prepended as a folder to every output's
	// Subfolder (for example the job id), so outputs of different jobs never
	// share a path while file names keep ComfyUI's form.
	JobPrefix string
	// Memory is the process's budget for runs: a run takes the peak it
	// estimates before its first node (waiting while other runs hold the
	// budget) and gives it back when it ends. Nil: unbounded.
	Memory *membudget.Budget
	// JobMemory bounds what one run holds at once (and is at most
	// Memory's size). A prompt that needs more fails before its first node
	// when its estimate shows it, else at the node that crosses it. 0:
	// Memory's size.
	JobMemory int64
	// OnMemoryWait, if set, is called when the run has to wait for the
	// need bytes it takes from Memory.
	OnMemoryWait func(need int64)
}

// Progress reports that a node finished. Steps is the node's step count
// when it has steps; none of the builtin nodes has, so Step and Steps are 0.
type Progress struct {
	NodeID, ClassType     string
	NodesDone, NodesTotal int
	Step, Steps           int
}

// Output is one file a node produced, in ComfyUI's ui-dict terms.
type Output struct {
	NodeID      string
	Kind        string // "images"
	Filename    string
	Subfolder   string
	Type        string // "output" or "temp"
	ContentType string
	Data        []byte
}

// NodeError is a node that failed: a bad input, an undecodable image, an
// unknown class. It carries what ComfyUI's execution_error carries.
type NodeError struct {
	NodeID    string
	ClassType string
	Message   string
	// Traceback is the Go stack when the node panicked, else empty.
	Traceback string
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("node %s (%s): %s", e.NodeID, e.ClassType, e.Message)
}

// ErrNoOutputs is returned when a prompt has no output node; ComfyUI
// reports it as prompt_no_outputs.
var ErrNoOutputs = errors.New("builtin: prompt has no output node")

// Execute runs the nodes that the prompt's output nodes need, each once, in
// dependency order. It checks ctx before every node and returns ctx.Err()
// when it is done; a failing node yields a *NodeError; an OnOutput error is
// returned wrapped.
//
// Before the first node it estimates the most memory the run will hold
// (see estimate): over env.JobMemory, the run fails at once with a
// *NodeError on the node that crosses it; otherwise that much is taken
// from env.Memory for the run.
func Execute(ctx context.Context, prompt map[string]Node, env Env) error {
	order, err := plan(prompt)
	if err != nil {
		return err
	}
	need, err := estimate(ctx, prompt, order, env)
	var me *MemoryError
	if errors.As(err, &me) {
		return &NodeError{NodeID: me.NodeID, ClassType: me.ClassType, Message: me.Error()}
	}
	r := newRun(prompt, env, len(order))
	if err := r.mem.reserve(ctx, need, env.OnMemoryWait); err != nil {
		return err
	}
	defer func() {
		clear(r.results) // what a failed run still holds is garbage for close
		r.mem.close()
	}()
	return r.all(ctx, order)
}

// CheckMemory estimates what running prompt holds at once without opening
// any input and returns a *MemoryError naming the node where it passes
// limit. What depends on an input file (LoadImage and the nodes that read
// it) counts for nothing here; Execute charges it once the file is open.
// A prompt that does not plan is not checked: the validator or the run
// reports it.
func CheckMemory(prompt map[string]Node, limit int64) error {
	order, err := plan(prompt)
	if err != nil {
		return nil
	}
	_, err = estimate(context.Background(), prompt, order, Env{JobMemory: limit})
	return err
}

func newRun(prompt map[string]Node, env Env, nodes int) *run {
	return &run{prompt: prompt, env: env, results: make(map[string][]any, nodes), counters: map[string]int{},
		mem: newMemory(env.Memory, env.JobMemory)}
}

// estimate follows the prompt's tensors through order without computing
// any pixel: every node's cost (see cost.go) is charged, its outputs held
// until their last reader has run, as the run will. It returns the most
// held at once, or a *MemoryError at the first node where that passes the
// run's bound. A node whose cost cannot be told beforehand (its input file
// cannot be read, a widget does not parse) counts for nothing, and so do
// the nodes that read its outputs: the estimate is then what the run holds
// at least, and the run charges the rest when it knows it.
func estimate(ctx context.Context, prompt map[string]Node, order []string, env Env) (int64, error) {
	r := newRun(prompt, env, len(order))
	r.mem.budget = nil // an estimate takes nothing
	readers := r.readers(order)
	for _, id := range order {
		n := prompt[id]
		d := catalog[n.ClassType]
		c := &nodeCall{ctx: ctx, run: r, id: id, def: d, node: n}
		outs, cost, err := d.cost(c)
		if err != nil {
			outs, cost = make([]any, len(d.outputs)), 0
			for i := range outs {
				outs[i] = unknownOutput{}
			}
		}
		if err := r.mem.charge(cost); err != nil {
			return r.mem.peak, nodeMemoryError(err, id, n.ClassType)
		}
		if err := r.mem.keep(outs, cost); err != nil {
			return r.mem.peak, nodeMemoryError(err, id, n.ClassType)
		}
		r.results[id] = outs
		r.retire(id, readers)
	}
	return r.mem.peak, nil
}

// nodeMemoryError names the node on a *MemoryError.
func nodeMemoryError(err error, id, class string) error {
	var me *MemoryError
	if errors.As(err, &me) {
		me.NodeID, me.ClassType = id, class
	}
	return err
}

// readers counts, for every node of order, the links that read its
// outputs.
func (r *run) readers(order []string) map[string]int {
	readers := make(map[string]int, len(order))
	for _, id := range order {
		for _, src := range r.sources(id) {
			readers[src]++
		}
	}
	return readers
}

// retire drops the outputs that node id was the last reader of (and its
// own, when nothing reads them), so that a chain of nodes holds two images
// at a time rather than one per node.
func (r *run) retire(id string, readers map[string]int) {
	for _, src := range r.sources(id) {
		if readers[src]--; readers[src] == 0 {
			r.mem.drop(r.results[src])
			delete(r.results, src)
		}
	}
	if readers[id] == 0 {
		r.mem.drop(r.results[id])
		delete(r.results, id)
	}
}

// all runs the nodes of order, one after the other, retiring outputs as
// their last reader has run.
func (r *run) all(ctx context.Context, order []string) error {
	readers := r.readers(order)
	for i, id := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		if r.env.OnStart != nil {
			r.env.OnStart(Progress{NodeID: id, ClassType: r.prompt[id].ClassType, NodesDone: i, NodesTotal: len(order)})
		}
		if err := r.execute(ctx, id); err != nil {
			return err
		}
		r.retire(id, readers)
		r.mem.collect() // after retire: nothing references what was released now
		if r.env.OnProgress != nil {
			r.env.OnProgress(Progress{NodeID: id, ClassType: r.prompt[id].ClassType, NodesDone: i + 1, NodesTotal: len(order)})
		}
	}
	return nil
}

// sources lists the nodes whose outputs node id reads, once per link (plan
// has checked the links).
func (r *run) sources(id string) []string {
	n := r.prompt[id]
	var srcs []string
	for _, in := range catalog[n.ClassType].required {
		if src, _, isLink, err := parseLink(n.Inputs[in.name]); isLink && err == nil {
			srcs = append(srcs, src)
		}
	}
	return srcs
}

// plan returns the ids of the output nodes and their ancestors in an order
// where every node follows its inputs. Output nodes are visited in id order
// (numerically when ids are numbers) so that SaveImage counters are stable.
func plan(prompt map[string]Node) ([]string, error) {
	var outputs []string
	for id, n := range prompt {
		if IsOutputNode(n.ClassType) {
			outputs = append(outputs, id)
		}
	}
	if len(outputs) == 0 {
		return nil, ErrNoOutputs
	}
	slices.SortFunc(outputs, compareIDs)

	const (
		visiting = 1
		done     = 2
	)
	state := make(map[string]int, len(prompt))
	var order []string
	var visit func(id string) error
	visit = func(id string) error {
		switch state[id] {
		case done:
			return nil
		case visiting:
			return &NodeError{NodeID: id, ClassType: prompt[id].ClassType, Message: "dependency cycle through this node"}
		}
		state[id] = visiting
		n := prompt[id]
		d, ok := catalog[n.ClassType]
		if !ok {
			return &NodeError{NodeID: id, ClassType: n.ClassType, Message: fmt.Sprintf("node %s does not exist", n.ClassType)}
		}
		for _, in := range d.required {
			src, _, isLink, err := parseLink(n.Inputs[in.name])
			if err != nil {
				return &NodeError{NodeID: id, ClassType: n.ClassType, Message: fmt.Sprintf("input %s: %v", in.name, err)}
			}
			if !isLink {
				continue
			}
			if _, ok := prompt[src]; !ok {
				return &NodeError{NodeID: id, ClassType: n.ClassType, Message: fmt.Sprintf("input %s links to missing node %s", in.name, src)}
			}
			if err := visit(src); err != nil {
				return err
			}
		}
		state[id] = done
		order = append(order, id)
		return nil
	}
	for _, id := range outputs {
		if err := visit(id); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// compareIDs orders numeric ids numerically and puts them before others.
func compareIDs(a, b string) int {
	na, ea := strconv.ParseInt(a, 10, 64)
	nb, eb := strconv.ParseInt(b, 10, 64)
	switch {
	case ea == nil && eb == nil:
		return cmpInt64(na, nb)
	case ea == nil:
		return -1
	case eb == nil:
		return 1
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// parseLink recognises a link value: a two-element list of a string node id
// and a numeric slot. Other lists are malformed links (ComfyUI's
// bad_linked_input); non-lists are widget values.
func parseLink(v any) (src string, slot int, isLink bool, err error) {
	l, ok := v.([]any)
	if !ok {
		return "", 0, false, nil
	}
	if len(l) != 2 {
		return "", 0, true, errors.New("a link must be [node_id, slot]")
	}
	id, ok := l[0].(string)
	if !ok {
		return "", 0, true, errors.New("a link's node id must be a string")
	}
	f, ok := l[1].(float64)
	if !ok || f < 0 || f != float64(int(f)) {
		return "", 0, true, errors.New("a link's slot must be a non-negative integer")
	}
	return id, int(f), true, nil
}

// run is the state of one Execute call.
type run struct {
	prompt  map[string]Node
	env     Env
	results map[string][]any
	// counters holds the next SaveImage counter per subfolder/prefix: the
	// per-job stand-in for ComfyUI's "highest existing file + 1".
	counters map[string]int
	mem      *memory
}

// execute runs one node, turning failures and panics into *NodeError and
// storing its outputs for its consumers. The node's cost is charged before
// it runs (a node that charges itself, LoadImage, does so as it learns
// it); what it does not keep as outputs is released when it returns. A
// cost that cannot be told leaves the node to fail as it would.
func (r *run) execute(ctx context.Context, id string) (err error) {
	n := r.prompt[id]
	d := catalog[n.ClassType]
	c := &nodeCall{ctx: ctx, run: r, id: id, def: d, node: n}
	defer func() {
		if p := recover(); p != nil {
			err = &NodeError{NodeID: id, ClassType: n.ClassType, Message: fmt.Sprint(p), Traceback: string(debug.Stack())}
		}
	}()
	if !d.chargesItself {
		if _, cost, cerr := d.cost(c); cerr == nil {
			if err := c.charge(cost); err != nil {
				return &NodeError{NodeID: id, ClassType: n.ClassType, Message: err.Error()}
			}
		}
	}
	out, err := d.run(c)
	if err != nil {
		var ne *NodeError
		var de *deliveryError
		switch {
		case errors.As(err, &de):
			return de.err
		case errors.As(err, &ne):
			return ne
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			return err
		}
		return &NodeError{NodeID: id, ClassType: n.ClassType, Message: err.Error()}
	}
	if err := r.mem.keep(out, c.charged); err != nil {
		return &NodeError{NodeID: id, ClassType: n.ClassType, Message: err.Error()}
	}
	r.results[id] = out
	return nil
}

// deliveryError marks an OnOutput failure so that execute returns it as the
// caller's error rather than blaming the node.
type deliveryError struct{ err error }

func (e *deliveryError) Error() string { return e.err.Error() }
func (e *deliveryError) Unwrap() error { return e.err }
