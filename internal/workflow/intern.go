package workflow

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Every submit spells the same few short strings again: the graph's
// structure names, that is object member names (node ids such as "1",
// "class_type", input names such as "image") and class types. Allocating
// each one anew was the largest share of a submit's garbage, so they are
// interned: the first sighting stores the string, later ones share it
// without allocating. Input values (file names, prompts) are never
// interned, so no client data is kept past its request.
//
// The table is an immutable map replaced on insert (copy on write), so the
// hot path is one atomic load and a lookup, with no lock that concurrent
// submits would contend on. It is bounded: once full (say, after clients
// sent many one-off names) it only stops saving allocations.
const (
	maxInterned    = 4096
	maxInternBytes = 64
)

var interned struct {
	m  atomic.Pointer[map[string]string] // never nil (see init)
	mu sync.Mutex                        // serializes inserts
}

func init() {
	empty := map[string]string{}
	interned.m.Store(&empty)
}

// intern returns string(b), shared with earlier calls for the same bytes
// when possible.
func intern(b []byte) string {
	if len(b) > maxInternBytes {
		return string(b)
	}
	if s, ok := (*interned.m.Load())[string(b)]; ok { // no allocation for the lookup
		return s
	}
	interned.mu.Lock()
	defer interned.mu.Unlock()
	old := *interned.m.Load()
	if s, ok := old[string(b)]; ok { // another submit inserted it meanwhile
		return s
	}
	s := string(b)
	if len(old) >= maxInterned {
		return s
	}
	next := maps.Clone(old)
	next[s] = s
	interned.m.Store(&next)
	return s
}
