package workflow

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// InputKey names one input of one node.
type InputKey struct {
	Node, Input string
}

// Option adjusts Validate.
type Option func(*validateConfig)

type validateConfig struct {
	resolved map[InputKey]bool
}

// WithResolvedInputs marks inputs that hold an asset reference the caller
// has already resolved to one of its own assets (a `core/ASSET` object or a
// plain file name matching a file_path). Validate skips their type and combo
// checks: the catalog's combo lists name files on the worker, which the
// staged asset will join only at dispatch.
func WithResolvedInputs(resolved map[InputKey]bool) Option {
	return func(c *validateConfig) { c.resolved = resolved }
}

// maxNodeIDBytes bounds node ids; ComfyUI's expanded ids ("12:3:7") stay far
// below it.
const maxNodeIDBytes = 256

// Validate checks g against the pool's catalog and returns nil or an
// *apierr.Error 422 invalid_workflow whose details.node_errors (NodeErrors)
// holds every problem found, ComfyUI style, and details.errors
// ([]GraphError) the graph-level ones.
//
// Scope, chosen to match ComfyUI where it matters and be stricter where it
// only crashes:
//   - every node: id, class_type presence, known class, and cycles (a cycle
//     anywhere is refused, reporting each node on it);
//   - nodes that are output nodes or feed one (what will execute): required
//     inputs, links (shape, target exists, slot exists, types match) and
//     widget values. Like ComfyUI, nodes no output depends on are not
//     input-checked and will not run, and inputs the class does not declare
//     are ignored.
func Validate(g Graph, cat Catalog, opts ...Option) error {
	var cfg validateConfig
	for _, o := range opts {
		o(&cfg)
	}
	ne := NodeErrors{}
	var graphErrs []GraphError
	ids := sortedIDs(g)

	var outputs []int // places in ids
	unknownClass := false
	for i, id := range ids {
		n := g[id]
		if !validNodeID(id) {
			ne.add(id, "", ReasonInvalidNodeID,
				"node ids must be 1 to %d bytes of printable UTF-8", maxNodeIDBytes)
		}
		if n.ClassType == "" {
			ne.add(id, "class_type", ReasonMissingNodeType, "the node has no class_type")
			unknownClass = true
			continue
		}
		class, ok := cat[n.ClassType]
		if !ok {
			ne.add(id, "class_type", ReasonMissingNodeType,
				"node class %s is not available on this pool", quote(n.ClassType))
			unknownClass = true
			continue
		}
		if class.OutputNode {
			outputs = append(outputs, i)
		}
	}

	deps := g.depIndex(ids)
	if comp := cycleComponents(deps); comp != nil {
		for i, node := range ids { // sorted, like the reports
			if comp[i] > 0 {
				ne.add(node, cycleField(g[node], i, ids, comp), ReasonCycle,
					"the node is part of a dependency cycle")
			}
		}
	}

	if len(outputs) == 0 && !unknownClass {
		graphErrs = append(graphErrs, GraphError{Reason: ReasonPromptNoOutputs,
			Message: "Prompt has no outputs: the workflow needs at least one output node such as SaveImage"})
	}

	live := reachable(outputs, deps)
	for i, id := range ids {
		if !live[i] {
			continue
		}
		n := g[id]
		class, ok := cat[n.ClassType]
		if !ok {
			continue
		}
		checkInputs(ne, g, cat, id, n, class, cfg.resolved)
	}

	if len(ne) > 0 || len(graphErrs) > 0 {
		return invalidWorkflow(ne, graphErrs)
	}
	return nil
}

// cycleField names the input through which node n, ids[i], reads from its
// own cycle (the first by name), so the client sees which wire to cut.
// comp is cycleComponents's answer; comp[i] > 0.
func cycleField(n Node, i int, ids []string, comp []int) string {
	best := ""
	for name, raw := range n.Inputs {
		if j, ok := linkTarget(raw, ids); !ok || comp[j] != comp[i] {
			continue
		}
		if best == "" || name < best {
			best = name
		}
	}
	return best
}

func checkInputs(ne NodeErrors, g Graph, cat Catalog, id string, n Node, class NodeClass, resolved map[InputKey]bool) {
	for _, spec := range class.Required {
		if _, ok := n.Inputs[spec.Name]; !ok {
			ne.add(id, spec.Name, ReasonRequiredInputMissing, "Required input is missing: %s", spec.Name)
		}
	}
	for _, group := range [][]InputSpec{class.Required, class.Optional} {
		for _, spec := range group {
			raw, ok := n.Inputs[spec.Name]
			if !ok || resolved[InputKey{Node: id, Input: spec.Name}] {
				continue
			}
			raw, wrapped := unwrapValue(raw)
			if !wrapped {
				// The usual link, read without allocating its target's id.
				if target, slot, ok := plainLinkBytes(raw); ok {
					if src, found := g[string(target)]; found {
						checkSource(ne, cat, id, spec, target, src, slot)
						continue
					}
				}
				if l, kind := parseLink(raw); kind != notLink {
					checkLink(ne, g, cat, id, spec, l, kind)
					continue
				}
			}
			checkWidget(ne, id, spec, raw)
		}
	}
}

func checkLink(ne NodeErrors, g Graph, cat Catalog, id string, spec InputSpec, l Link, kind linkKind) {
	if kind == badLink {
		ne.add(id, spec.Name, ReasonBadLinkedInput,
			"Bad linked input, must be a length-2 list of [node_id, slot_index]")
		return
	}
	src, ok := g[l.Node]
	if !ok {
		ne.add(id, spec.Name, ReasonDanglingLink, "input %q links to node %s, which does not exist", spec.Name, quote(l.Node))
		return
	}
	checkSource(ne, cat, id, spec, []byte(l.Node), src, l.Slot)
}

// checkSource checks a link from input spec of node id to output slot of
// the existing node src (whose id is srcID).
func checkSource(ne NodeErrors, cat Catalog, id string, spec InputSpec, srcID []byte, src Node, slot int) {
	srcClass, ok := cat[src.ClassType]
	if !ok {
		return // the source's unknown class is already reported on it
	}
	if slot >= len(srcClass.Outputs) {
		ne.add(id, spec.Name, ReasonInvalidOutputSlot,
			"input %q links to output %d of node %s, which has %d output(s)", spec.Name, slot, quote(string(srcID)), len(srcClass.Outputs))
		return
	}
	if out := srcClass.Outputs[slot]; !typesMatch(out, spec.Type) {
		ne.add(id, spec.Name, ReasonReturnTypeMismatch,
			"Return type mismatch between linked nodes: %s, received_type(%s) mismatch input_type(%s)", spec.Name, out, spec.Type)
	}
}

func validNodeID(id string) bool {
	if id == "" || len(id) > maxNodeIDBytes || !utf8.ValidString(id) {
		return false
	}
	return strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}
