package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
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
	return decodeLink(raw)
}

// decodeLink is parseLink's full decode of an array, for the forms
// plainLink declines.
func decodeLink(raw json.RawMessage) (Link, linkKind) {
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

// depIndex returns, for each node of ids (sortedIDs(g)), the places in ids
// of the existing nodes it reads from. Nodes are numbered by their place in
// ids so that the graph walks of Validate (cycles, reachability) run on
// slices instead of maps: they run on every submit. All lists share one
// backing array.
func (g Graph) depIndex(ids []string) [][]int {
	total := 0
	for _, id := range ids {
		total += len(g[id].Inputs)
	}
	deps := make([][]int, len(ids))
	all := make([]int, 0, total) // never grows: the lists stay valid
	for i, id := range ids {
		start := len(all)
		for _, raw := range g[id].Inputs {
			if j, ok := linkTarget(raw, ids); ok {
				all = append(all, j)
			}
		}
		deps[i] = all[start:len(all):len(all)]
	}
	return deps
}

// linkTarget returns the place in ids (sorted) of the node raw links to,
// when raw is a well-formed link to an existing node.
func linkTarget(raw json.RawMessage, ids []string) (int, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return 0, false
	}
	if id, _, ok := plainLinkBytes(raw); ok {
		return indexOf(ids, id)
	}
	l, kind := decodeLink(raw)
	if kind != goodLink {
		return 0, false
	}
	return indexOf(ids, []byte(l.Node))
}

// indexOf finds id in the sorted ids without allocating.
func indexOf(ids []string, id []byte) (int, bool) {
	lo, hi := 0, len(ids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ids[m] < string(id) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(ids) && ids[lo] == string(id)
}

// cycleComponents finds the nodes that lie on a dependency cycle, as
// strongly connected components (Tarjan, iterative so that a long chain
// cannot exhaust the stack). It returns, per node, the number (from 1) of
// its cyclic component, 0 for nodes on no cycle; nil when there is no
// cycle at all.
func cycleComponents(deps [][]int) []int {
	n := len(deps)
	// index: visit order from 1 (0 = not visited yet); low: Tarjan's
	// low-link; onStack. One allocation for all three.
	work := make([]int, 3*n)
	index, low, onStack := work[:n:n], work[n:2*n:2*n], work[2*n:]
	var stack []int
	var comp []int
	next, compN := 1, 0

	type callFrame struct {
		node, edge int
	}
	var call []callFrame
	for root := range n {
		if index[root] != 0 {
			continue
		}
		call = append(call[:0], callFrame{node: root})
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = 1
		for len(call) > 0 {
			f := &call[len(call)-1]
			if d := deps[f.node]; f.edge < len(d) {
				w := d[f.edge]
				f.edge++
				if index[w] == 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = 1
					call = append(call, callFrame{node: w})
				} else if onStack[w] == 1 && index[w] < low[f.node] {
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
				onStack[m] = 0
			}
			if len(members) > 1 || slices.Contains(deps[v], v) {
				if comp == nil {
					comp = make([]int, n)
				}
				compN++
				for _, m := range members {
					comp[m] = compN
				}
			}
		}
	}
	return comp
}

// reachable marks the roots and every node they transitively read from.
func reachable(roots []int, deps [][]int) []bool {
	seen := make([]bool, len(deps))
	queue := append([]int(nil), roots...)
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
