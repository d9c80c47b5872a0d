package workflow

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// cycles against the definition, on random graphs: a node is on a cycle
// when it reaches itself, and two cyclic nodes share a component when each
// reaches the other.
func TestCyclesMatchesReachability(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		n := 1 + rng.IntN(12)
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprint(i)
		}
		deps := map[string][]string{}
		for _, id := range ids {
			for range rng.IntN(3) {
				deps[id] = append(deps[id], ids[rng.IntN(n)])
			}
		}
		reach := func(from, to string) bool { // by one or more edges
			seen := map[string]bool{}
			queue := append([]string(nil), deps[from]...)
			for len(queue) > 0 {
				v := queue[0]
				queue = queue[1:]
				if v == to {
					return true
				}
				if !seen[v] {
					seen[v] = true
					queue = append(queue, deps[v]...)
				}
			}
			return false
		}
		comps := cycles(sortedIDs(deps2(ids, deps)), deps)
		for _, a := range ids {
			if _, on := comps[a]; on != reach(a, a) {
				t.Fatalf("round %d: node %s on a cycle = %v, reaches itself = %v (deps %v)", round, a, on, reach(a, a), deps)
			}
			for _, b := range ids {
				ca, oka := comps[a]
				cb, okb := comps[b]
				if oka && okb && (ca == cb) != (reach(a, b) && reach(b, a)) {
					t.Fatalf("round %d: %s and %s share a component = %v (deps %v)", round, a, b, ca == cb, deps)
				}
			}
		}
	}
}

// deps2 is a map with every id as a key, for sortedIDs.
func deps2(ids []string, deps map[string][]string) map[string][]string {
	out := make(map[string][]string, len(ids))
	for _, id := range ids {
		out[id] = deps[id]
	}
	return out
}

// cycles runs cycleComponents on a graph given by ids: ids are deps's
// nodes, sorted.
func cycles(ids []string, deps map[string][]string) map[string]int {
	idx := make([][]int, len(ids))
	for i, id := range ids {
		for _, d := range deps[id] {
			if j, ok := indexOf(ids, []byte(d)); ok {
				idx[i] = append(idx[i], j)
			}
		}
	}
	return cycleIDs(ids, cycleComponents(idx))
}

// cycleIDs keys cycleComponents's answer by node id (ids as given to
// depIndex), keeping only the nodes on a cycle: what the tests compare.
func cycleIDs(ids []string, comp []int) map[string]int {
	out := map[string]int{}
	for i, c := range comp {
		if c > 0 {
			out[ids[i]] = c
		}
	}
	return out
}
