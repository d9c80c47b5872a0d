// Package memclaim is the in-process storage.ClaimStore of the embedded
// (single-process) deployment. Claims live in a map guarded by a mutex, so
// they vanish on restart — acceptable because claims are a losable fast guard
// and the database rows carry their own uniqueness backstops.
package memclaim

import (
	"context"
	"sync"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// sweepEvery is how many Claim calls pass between sweeps of expired entries.
// Sweeping on a call count keeps the map bounded without a goroutine.
const sweepEvery = 256

// Store holds claims in memory. The zero value is not usable; call New.
type Store struct {
	mu      sync.Mutex
	claims  map[claimKey]time.Time // expiry deadline per held claim
	calls   int
	nowFunc func() time.Time
}

type claimKey struct{ scope, key string }

var _ storage.ClaimStore = (*Store)(nil)

// New returns an empty in-process claim store.
func New() *Store {
	return &Store{claims: map[claimKey]time.Time{}, nowFunc: time.Now}
}

// Claim takes key within scope for ttl, reporting false when a live claim
// already holds it. An expired claim counts as free.
func (s *Store) Claim(ctx context.Context, scope, key string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	now := s.nowFunc()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls%sweepEvery == 0 {
		s.sweepLocked(now)
	}
	k := claimKey{scope, key}
	if deadline, held := s.claims[k]; held && now.Before(deadline) {
		return false, nil
	}
	s.claims[k] = now.Add(ttl)
	return true, nil
}

// Release frees a claim; releasing a key that is not held is not an error.
func (s *Store) Release(ctx context.Context, scope, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, claimKey{scope, key})
	return nil
}

// Close does nothing: there are no connections to release.
func (s *Store) Close() error { return nil }

// sweepLocked drops every expired claim. s.mu must be held.
func (s *Store) sweepLocked(now time.Time) {
	for k, deadline := range s.claims {
		if !now.Before(deadline) {
			delete(s.claims, k)
		}
	}
}

// size reports how many entries the map holds, expired or not (for tests).
func (s *Store) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.claims)
}
