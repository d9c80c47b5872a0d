package storage

import (
	"errors"
	"sync"

	"github.com/comfygate/comfygate/storage/blob"
)

// Retracter is implemented by a Publisher whose Publish can make an object
// of its own visible at a fresh key (an S3 upload without a declared
// hash). Retract removes that object again. A store calls it for a create
// that published and is known not to have committed, so that the loser of
// a race, or a create whose transaction failed, does not leave its object
// to the orphan sweep. Never for a create whose outcome is in doubt: the
// record may name the object.
type Retracter interface {
	Retract() error
}

// TrackedPublisher wraps a create's Publisher and remembers whether
// Publish made the create's own object the blob's, for Retract.
type TrackedPublisher struct {
	Publisher
	mu  sync.Mutex
	own bool
}

// Track wraps p.
func Track(p Publisher) *TrackedPublisher { return &TrackedPublisher{Publisher: p} }

// Publish calls the wrapped Publish and notes whether the object it
// answers is the create's own one at a fresh key.
func (t *TrackedPublisher) Publish(held *blob.Ref) (blob.Ref, error) {
	obj, err := t.Publisher.Publish(held)
	if err == nil && obj.Key != "" && obj.Key == t.Publisher.Key() {
		t.mu.Lock()
		t.own = true
		t.mu.Unlock()
	}
	return obj, err
}

// Failed is called with a create's error: when it is an answer that the
// create did not commit (ErrNotSent, ErrNotCommitted, or the create's own
// refusal before its commit, which the caller marks so by passing
// rolledBack) and Publish had made the create's own object visible, the
// object is retracted. The retraction's own failure is left to the orphan
// sweep.
func (t *TrackedPublisher) Failed(err error, rolledBack bool) {
	if err == nil || !(rolledBack || errors.Is(err, ErrNotSent) || errors.Is(err, ErrNotCommitted)) {
		return
	}
	t.mu.Lock()
	own := t.own
	t.mu.Unlock()
	if r, ok := t.Publisher.(Retracter); ok && own {
		_ = r.Retract()
	}
}
