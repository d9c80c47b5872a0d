package comfyui

import (
	"context"
	"encoding/json"
	"fmt"

	"go.uber.org/zap"
)

// Prompt ids. An attempt sends a prompt_id of its own (attemptID) and
// follows the one POST /prompt answers: ComfyUI honours the client's from
// upstream commit 260a5ca5 (2025-07-14), so there they are the same, and
// before it answers an id of its own. Until that answer comes, the prompt
// may already run and send messages under an id nobody knows yet: while
// an attempt waits for its answer, the worker keeps the messages of
// unclaimed ids (keepUnclaimed) and hands them to the attempt whose answer
// names them (claim), before anything later. The prompt also carries the
// attempt's id in its extra_data (attemptMarker), which ComfyUI keeps in
// /queue: an attempt whose answer was lost finds its prompt there by it,
// whatever id the worker gave it, and follows it instead of running it
// again elsewhere.

// attemptMarker is the extra_data key that names the attempt of a prompt.
const attemptMarker = "comfygate_attempt"

// maxUnclaimed bounds the messages a worker keeps for unclaimed ids.
const maxUnclaimed = 1024

// keepUnclaimed keeps a message of a prompt no attempt has claimed while
// an answer is awaited. Called with w.mu held.
func (w *worker) keepUnclaimed(promptID string, e event) {
	if w.submitting == 0 || w.unclaimedN >= maxUnclaimed {
		return
	}
	if w.unclaimed == nil {
		w.unclaimed = map[string][]event{}
	}
	w.unclaimed[promptID] = append(w.unclaimed[promptID], e)
	w.unclaimedN++
}

// awaitingAnswer marks an attempt waiting for POST /prompt's answer; the
// returned func ends the wait (the messages no attempt claimed are
// dropped once no attempt waits).
func (w *worker) awaitingAnswer() (done func()) {
	w.mu.Lock()
	w.submitting++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		w.submitting--
		if w.submitting == 0 {
			w.unclaimed, w.unclaimedN = nil, 0
		}
		w.mu.Unlock()
	}
}

// claim makes promptID the attempt's prompt on the worker: its messages
// are routed to a from now on, after those kept for it.
func (a *attempt) claim(promptID string) {
	w := a.w
	w.mu.Lock()
	if promptID != a.promptID {
		if w.attempts[a.promptID] == a {
			delete(w.attempts, a.promptID)
		}
		a.promptID = promptID
		w.attempts[promptID] = a
	}
	a.conn = w.conn
	kept := w.unclaimed[promptID]
	delete(w.unclaimed, promptID)
	w.unclaimedN -= len(kept)
	for _, e := range kept {
		a.push(e)
	}
	w.mu.Unlock()
	a.log = a.log.With(zap.String("prompt_id", promptID))
}

// located is where a prompt was found on the worker.
type located struct {
	id    string
	state queueState
}

// locate finds the attempt's prompt in the worker's /queue by its id or by
// the attempt marker in its extra_data.
func (a *attempt) locate(ctx context.Context) (located, error) {
	return a.w.find(ctx, a.promptID, a.sentID)
}

// find reads GET /queue for the prompt whose id is promptID or, when
// marker is set, whose extra_data names that attempt. Only index 1 (the
// prompt id) and index 3 (extra_data) of each item are read, and the items
// (which carry extra_data) are never logged.
func (w *worker) find(ctx context.Context, promptID, marker string) (located, error) {
	var q struct {
		Running [][]json.RawMessage `json:"queue_running"`
		Pending [][]json.RawMessage `json:"queue_pending"`
	}
	if err := w.getJSON(ctx, "/queue", nil, &q); err != nil {
		return located{}, err
	}
	match := func(items [][]json.RawMessage) (string, bool) {
		for _, it := range items {
			var id string
			if len(it) < 2 || json.Unmarshal(it[1], &id) != nil {
				continue
			}
			if id == promptID {
				return id, true
			}
			var extra map[string]any
			if marker != "" && len(it) > 3 && json.Unmarshal(it[3], &extra) == nil && extra[attemptMarker] == marker {
				return id, true
			}
		}
		return "", false
	}
	if id, ok := match(q.Running); ok {
		return located{id, runningInQueue}, nil
	}
	if id, ok := match(q.Pending); ok {
		return located{id, pendingInQueue}, nil
	}
	return located{}, nil
}

// unmatched is the check of a reconcile that found the prompt in neither
// /queue nor /history: when the worker never mentioned it (no message, no
// queue entry) while the socket it was submitted on stayed up, the prompt
// the answer named is not one the worker has, and the worker is broken.
func (a *attempt) unmatched() error {
	w := a.w
	w.mu.Lock()
	sameSocket := a.conn != 0 && w.conn == a.conn
	w.mu.Unlock()
	if a.seen || !sameSocket {
		return nil
	}
	why := fmt.Sprintf("POST /prompt answered prompt_id %s, which its socket, /queue and /history never named", a.promptID)
	w.markBroken(why)
	return fmt.Errorf("worker %s: %s", w.base.Redacted(), why)
}
