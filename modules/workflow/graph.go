package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// Graph is an API-format workflow: node id → node.
type Graph map[string]Node

// Node is one API-format node. Inputs stay raw JSON so that values are
// forwarded to a worker byte for byte, whatever a custom node expects.
type Node struct {
	ClassType string                     `json:"class_type"`
	Inputs    map[string]json.RawMessage `json:"inputs"`
	// Meta is the optional `_meta` object (title), kept for round trips.
	Meta json.RawMessage `json:"_meta,omitempty"`
}

// SetInput replaces one input value, for example to rewrite an asset
// reference into the file name staged on a worker. The node must exist.
func (g Graph) SetInput(node, input string, value any) error {
	n, ok := g[node]
	if !ok {
		return fmt.Errorf("set input %s.%s: no such node", node, input)
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("set input %s.%s: %w", node, input, err)
	}
	if n.Inputs == nil {
		n.Inputs = map[string]json.RawMessage{}
	}
	n.Inputs[input] = raw
	g[node] = n
	return nil
}

// Link is an input wired to another node's output: `[node_id, slot]`.
type Link struct {
	Node string
	Slot int
}

// linkKind says how a raw input value reads as a link.
type linkKind int

const (
	notLink linkKind = iota
	goodLink
	badLink
)

// ParseLink reads an input value as a link. Like ComfyUI, any JSON array is
// meant as a link; ok is false when raw is not an array or the array is not
// a well-formed `[string id, non-negative integer slot]`.
func ParseLink(raw json.RawMessage) (Link, bool) {
	l, kind := parseLink(raw)
	return l, kind == goodLink
}

func parseLink(raw json.RawMessage) (Link, linkKind) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return Link{}, notLink
	}
	if l, ok := plainLink(raw); ok {
		return l, goodLink
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil || len(parts) != 2 {
		return Link{}, badLink
	}
	var id string
	if json.Unmarshal(parts[0], &id) != nil {
		return Link{}, badLink
	}
	var slot float64
	if json.Unmarshal(parts[1], &slot) != nil || slot < 0 || slot != math.Trunc(slot) || slot > math.MaxInt32 {
		return Link{}, badLink
	}
	return Link{Node: id, Slot: int(slot)}, goodLink
}

// unwrapValue strips ComfyUI's `{"__value__": x}` wrapper, which marks a
// literal list that must not be read as a link.
func unwrapValue(raw json.RawMessage) (json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return raw, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return raw, false
	}
	if v, ok := obj["__value__"]; ok {
		return v, true
	}
	return raw, false
}

// edges returns, for every node, the distinct existing nodes it reads from.
func (g Graph) edges() map[string][]string {
	out := make(map[string][]string, len(g))
	for id, n := range g {
		var deps []string
		for _, raw := range n.Inputs {
			l, kind := parseLink(raw)
			if kind != goodLink {
				continue
			}
			if _, ok := g[l.Node]; ok {
				deps = append(deps, l.Node)
			}
		}
		out[id] = deps
	}
	return out
}

// cycles returns the set of nodes that lie on a dependency cycle, found as
// strongly connected components (Tarjan, iterative so that a long chain
// cannot exhaust the stack). Nodes are numbered by their place in ids so
// that the bookkeeping is slices, not maps: this runs on every submit.
func cycles(ids []string, deps map[string][]string) map[string]int {
	n := len(ids)
	pos := make(map[string]int, n)
	for i, id := range ids {
		pos[id] = i
	}
	index := make([]int, n) // visit order from 1; 0 = not visited yet
	low := make([]int, n)
	onStack := make([]bool, n)
	var stack []int
	comp := map[string]int{} // node → component number, only for cyclic ones
	next, compN := 1, 0

	type callFrame struct {
		node, edge int
	}
	for root := range n {
		if index[root] != 0 {
			continue
		}
		call := []callFrame{{node: root}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if d := deps[ids[f.node]]; f.edge < len(d) {
				w, ok := pos[d[f.edge]]
				f.edge++
				if !ok {
					continue
				}
				if index[w] == 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, callFrame{node: w})
				} else if onStack[w] && index[w] < low[f.node] {
					low[f.node] = index[w]
				}
				continue
			}
			v := f.node
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].node
				if low[v] < low[p] {
					low[p] = low[v]
				}
			}
			if low[v] != index[v] {
				continue
			}
			first := len(stack) - 1
			for stack[first] != v {
				first--
			}
			members := stack[first:]
			stack = stack[:first]
			for _, m := range members {
				onStack[m] = false
			}
			if len(members) > 1 || selfLoop(ids[v], deps) {
				compN++
				for _, m := range members {
					comp[ids[m]] = compN
				}
			}
		}
	}
	return comp
}

func selfLoop(v string, deps map[string][]string) bool {
	for _, d := range deps[v] {
		if d == v {
			return true
		}
	}
	return false
}

// reachable returns the roots and every node they transitively read from.
func reachable(roots []string, deps map[string][]string) map[string]bool {
	seen := make(map[string]bool, len(deps))
	queue := append([]string(nil), roots...)
	for _, r := range roots {
		seen[r] = true
	}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, d := range deps[v] {
			if !seen[d] {
				seen[d] = true
				queue = append(queue, d)
			}
		}
	}
	return seen
}
