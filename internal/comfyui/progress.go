package comfyui

import (
	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/workflow"
)

// tracker turns a prompt's events into the job's progress snapshot.
//
// value = (nodes done + step/steps of the node running now) / nodes to run:
// a sampler's steps subdivide its node's share. The value only ever grows
// (a node ComfyUI re-enters or an event out of order never moves it back)
// and stays below 1 until the prompt is confirmed done.
type tracker struct {
	// planned are the nodes ComfyUI will run: the output nodes and their
	// ancestors.
	planned map[string]bool
	done    map[string]bool
	current string
	step    int
	steps   int

	value    float64
	lastDone int
	lastStep int
	lastNode string
	reported bool
}

// plan computes the nodes that will run, as ComfyUI does: from each output
// node (per the catalog) up through its links.
func (t *tracker) plan(g workflow.Graph, cat workflow.Catalog) {
	t.planned, t.done = map[string]bool{}, map[string]bool{}
	var visit func(id string)
	visit = func(id string) {
		n, ok := g[id]
		if !ok || t.planned[id] {
			return
		}
		t.planned[id] = true
		for _, raw := range n.Inputs {
			if l, ok := workflow.ParseLink(raw); ok {
				visit(l.Node)
			}
		}
	}
	for id, n := range g {
		if c, ok := cat[n.ClassType]; ok && c.OutputNode {
			visit(id)
		}
	}
	if len(t.planned) == 0 {
		for id := range g {
			t.planned[id] = true
		}
	}
}

// enter records that node id runs now; the node running before it is done.
func (t *tracker) enter(id string) {
	if id == t.current {
		return
	}
	if t.current != "" {
		t.markDone(t.current)
	}
	t.current, t.step, t.steps = id, 0, 0
}

func (t *tracker) markDone(ids ...string) {
	for _, id := range ids {
		if t.planned[id] {
			t.done[id] = true
		}
	}
}

// snapshot returns the progress and whether it differs from the last one.
func (t *tracker) snapshot(g workflow.Graph, final bool) (jobs.Progress, bool) {
	total := len(t.planned)
	doneN := len(t.done)
	frac := 0.0
	if t.current != "" && !t.done[t.current] && t.steps > 0 {
		frac = min(float64(t.step)/float64(t.steps), 1)
	}
	v := 0.0
	if total > 0 {
		v = min((float64(doneN)+frac)/float64(total), 0.99)
	}
	if final {
		v, doneN = 1, total
	}
	t.value = max(t.value, v)
	p := jobs.Progress{Value: t.value, NodesDone: doneN, NodesTotal: total}
	if t.current != "" && !final {
		id := t.current
		p.CurrentNode = &id
		if n, ok := g[id]; ok {
			class := n.ClassType
			p.CurrentNodeClass, p.Message = &class, &class
		}
		if t.steps > 0 {
			step, steps := t.step, t.steps
			p.Step, p.Steps = &step, &steps
		}
	}
	changed := !t.reported || doneN != t.lastDone || t.step != t.lastStep || t.current != t.lastNode || final
	t.reported, t.lastDone, t.lastStep, t.lastNode = true, doneN, t.step, t.current
	return p, changed
}
