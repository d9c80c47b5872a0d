package catalog

import (
	"sort"
	"strings"
)

// maxSuggestInput bounds the work an unknown id can cause: ids are ≤193
// characters, so anything longer is cut before distances are computed.
const maxSuggestInput = 256

// Suggest returns up to n ids the caller sees that are closest to id, for a
// model_not_found detail. A candidate qualifies when it shares the provider
// or is within an edit distance of about a third of the query's length;
// candidates are ranked by edit distance, same provider first on ties, then
// by id. Models the audience cannot see are never suggested.
func (c *Catalog) Suggest(id string, aud Audience, n int) []string {
	if n <= 0 {
		return nil
	}
	q := strings.ToLower(strings.Trim(id, "/"))
	if len(q) > maxSuggestInput {
		q = q[:maxSuggestInput]
	}
	provider, _, _ := strings.Cut(q, "/")
	threshold := max(3, len(q)/3)
	type cand struct {
		id           string
		dist         int
		sameProvider bool
	}
	var cands []cand
	row := make([]int, 0, maxSuggestInput+1)
	for _, m := range c.models {
		if !aud.Sees(m) {
			continue
		}
		same := m.Provider == provider
		if !same && abs(len(m.ID)-len(q)) > threshold {
			continue // cannot be within the threshold: skip the O(n·m) work
		}
		d := levenshtein(q, m.ID, &row)
		if same || d <= threshold {
			cands = append(cands, cand{m.ID, d, same})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.dist != b.dist {
			return a.dist < b.dist
		}
		if a.sameProvider != b.sameProvider {
			return a.sameProvider
		}
		return a.id < b.id
	})
	out := make([]string, 0, min(n, len(cands)))
	for _, cd := range cands[:min(n, len(cands))] {
		out = append(out, cd.id)
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// levenshtein is the byte-wise edit distance; row is scratch space reused
// across calls.
func levenshtein(a, b string, row *[]int) int {
	r := (*row)[:0]
	for j := 0; j <= len(b); j++ {
		r = append(r, j)
	}
	for i := 1; i <= len(a); i++ {
		prev := r[0]
		r[0] = i
		for j := 1; j <= len(b); j++ {
			cur := r[j]
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			r[j] = min(r[j]+1, r[j-1]+1, prev+cost)
			prev = cur
		}
	}
	*row = r
	return r[len(b)]
}
