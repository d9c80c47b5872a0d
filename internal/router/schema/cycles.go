package schema

import "errors"

// checkCycles rejects schemas that can recurse without consuming any input
// (A = allOf[A], or a $ref chain back to itself): validating them would never
// end. Recursion through properties, additionalProperties or items is fine,
// since the body is finite; so the check looks for cycles made only of
// in-place edges ($ref, allOf, anyOf, oneOf).
func checkCycles(root *node) error {
	var all []*node
	seen := map[*node]bool{root: true}
	queue := []*node{root}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		all = append(all, n)
		next := inPlaceEdges(n)
		for _, m := range n.props {
			next = append(next, m)
		}
		next = append(next, n.extra, n.items)
		for _, m := range next {
			if m != nil && !seen[m] {
				seen[m] = true
				queue = append(queue, m)
			}
		}
	}
	const (
		visiting = 1
		done     = 2
	)
	state := make(map[*node]int, len(all))
	var walk func(n *node) error
	walk = func(n *node) error {
		switch state[n] {
		case visiting:
			return errors.New("schema recurses into itself without consuming input (cyclic $ref/allOf/anyOf/oneOf)")
		case done:
			return nil
		}
		state[n] = visiting
		for _, m := range inPlaceEdges(n) {
			if err := walk(m); err != nil {
				return err
			}
		}
		state[n] = done
		return nil
	}
	for _, n := range all {
		if err := walk(n); err != nil {
			return err
		}
	}
	return nil
}

func inPlaceEdges(n *node) []*node {
	out := make([]*node, 0, len(n.allOf)+len(n.anyOf)+len(n.oneOf)+1)
	out = append(append(append(out, n.allOf...), n.anyOf...), n.oneOf...)
	if n.refAlias != nil {
		out = append(out, n.refAlias)
	}
	return out
}
