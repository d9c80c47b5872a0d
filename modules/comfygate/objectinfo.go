package comfygate

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/comfygate/comfygate/internal/builtin"
)

// objectInfoSource is an executor that has its node catalog in ComfyUI's
// own /object_info form (a comfyui pool: the workers' answers, merged).
type objectInfoSource interface {
	ObjectInfo(ctx context.Context) (map[string]json.RawMessage, error)
}

var builtinObjectInfo = sync.OnceValues(func() (map[string]json.RawMessage, error) {
	var info map[string]json.RawMessage
	err := json.Unmarshal(builtin.ObjectInfo(), &info)
	return info, err
})

// ObjectInfo returns a pool's node catalog as ComfyUI's GET /object_info
// answers it, one raw entry per class: what the pool's workers published
// (merged), or the built-in executor's nodes. The pool must exist (see
// HasPool). Valid after Ready.
func (a *App) ObjectInfo(ctx context.Context, pool string) (map[string]json.RawMessage, error) {
	if src, ok := a.executors[pool].exec.(objectInfoSource); ok {
		return src.ObjectInfo(ctx)
	}
	return builtinObjectInfo()
}
