package comfyui

import (
	"context"
	"encoding/json"
	"time"

	"github.com/comfygate/comfygate/internal/workflow"
)

// probeLoop polls GET /prompt for the worker's load and health, and
// re-reads /object_info every RefreshInterval.
func (w *worker) probeLoop(ctx context.Context) {
	// Probes start once the first connection attempt is over (so that a
	// probe never makes a worker healthy before its socket is up), at a
	// random point of the interval, and each next one comes after a
	// jittered interval, so that the workers of a pool started together
	// are probed spread out, not in step.
	select {
	case <-w.firstTry:
	case <-ctx.Done():
		return
	}
	next := time.Duration(randInt64n(int64(w.pool.cfg.healthInterval()) + 1))
	for {
		if !sleepCtx(ctx, next) {
			return
		}
		next = jittered(w.pool.cfg.healthInterval())
		var st struct {
			ExecInfo struct {
				QueueRemaining int `json:"queue_remaining"`
			} `json:"exec_info"`
		}
		if err := w.getJSON(ctx, "/prompt", nil, &st); err != nil {
			if ctx.Err() == nil {
				w.markFailure(err)
			}
			continue
		}
		w.mu.Lock()
		w.queueRemaining = st.ExecInfo.QueueRemaining
		stale := time.Since(w.catalogAt) >= w.refreshEvery
		w.mu.Unlock()
		w.pool.reindex(w)
		if stale {
			if err := w.refreshCatalog(ctx); err != nil {
				if ctx.Err() == nil {
					w.markFailure(err)
				}
				continue
			}
		}
		w.markOK()
	}
}

// refreshCatalog re-reads /object_info.
func (w *worker) refreshCatalog(ctx context.Context) error {
	body, err := w.getBytes(ctx, "/object_info", nil)
	if err != nil {
		return err
	}
	cat, err := workflow.ParseObjectInfo(body)
	if err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return err
	}
	w.mu.Lock()
	w.catalog, w.objectInfo, w.catalogAt = cat, raw, time.Now()
	w.refreshEvery = jittered(w.pool.cfg.RefreshInterval)
	w.mu.Unlock()
	w.pool.catalogChanged()
	w.pool.touch(w)
	return nil
}

// reconnectSleep waits between reconnects; tests replace it to see the
// backoff without waiting.
var reconnectSleep = sleepCtx

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
