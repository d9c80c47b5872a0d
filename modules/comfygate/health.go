package comfygate

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"

	"github.com/comfygate/comfygate/storage/blob"
)

// DependencyStatus is one backend's answer to a readiness check.
type DependencyStatus struct {
	// Name is blobs, storage or redis.
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Error says why not; empty when OK.
	Error string `json:"error,omitempty"`
}

// absentHash names no object; asking for it shows whether the blob store
// answers (a missing object is an answer).
var absentHash = blob.HashPrefix + strings.Repeat("0", 64)

// pinger is a claim store that can be asked whether Redis answers.
type pinger interface{ Ping(context.Context) error }

// Readiness asks each backend, at once and concurrently, whether it answers
// now. Backends that are not open yet are opened as a request would open
// them: the one that failed is reported with its error, those opened
// before it as answering, and those after it as not reached.
func (a *App) Readiness(ctx context.Context) []DependencyStatus {
	r := a.res
	if err := r.open(); err != nil {
		var de *DependencyError
		failed := ""
		if errors.As(err, &de) {
			failed = de.Dependency
		}
		var out []DependencyStatus
		reached := true
		for _, name := range r.dependencies() {
			switch {
			case name == failed:
				out = append(out, DependencyStatus{Name: name, Error: de.Err.Error()})
				reached = false
			case reached && failed != "":
				out = append(out, DependencyStatus{Name: name, OK: true})
			default:
				out = append(out, DependencyStatus{Name: name, Error: "not reached: " + err.Error()})
			}
		}
		return out
	}
	checks := map[string]func(context.Context) error{
		"storage": r.store.Ping,
		"blobs": func(ctx context.Context) error {
			if _, err := r.blobs.Stat(ctx, blob.Ref{Hash: absentHash}); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		},
	}
	if p, ok := r.claims.(pinger); ok {
		checks["redis"] = p.Ping
	}
	names := r.dependencies()
	out := make([]DependencyStatus, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		out[i] = DependencyStatus{Name: name, OK: true}
		check := checks[name]
		if check == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := check(ctx); err != nil {
				out[i] = DependencyStatus{Name: name, Error: err.Error()}
			}
		}()
	}
	wg.Wait()
	return out
}
