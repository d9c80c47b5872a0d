// Package redisclaim is the production storage.ClaimStore: single-use claims
// as Redis keys with an expiry. Redis is a fast, losable guard here; the
// database's uniqueness constraints are the durable backstop, so a flushed
// Redis costs duplicates refused later, never lost data.
//
// Errors are returned, never swallowed: callers treat a failed claim as
// "not claimed" and refuse the request (fail closed).
package redisclaim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/internal/redispipe"
)

// maxRawKey is the longest client key stored verbatim. Longer keys are
// replaced by "sha256:<hex>" (71 bytes), which is itself longer than
// maxRawKey, so a verbatim key can never equal a hashed one.
const maxRawKey = 64

// Store is a storage.ClaimStore on one Redis client.
type Store struct {
	// pipe sends claims, together with the process's other commands to
	// the same Redis (bus publishes) that are waiting, as one pipeline:
	// one round trip and system call for many, each with its own answer.
	pipe   *redispipe.Pipe
	prefix string
}

var _ storage.ClaimStore = (*Store)(nil)

// New builds a store from a Redis address (one server, a Sentinel set or
// a Cluster; see storage/redisconn). It does not dial:
// the first command connects, so configuration can be validated offline.
// Every key the store writes starts with prefix (for example "comfygate:").
func New(url string, prefix string) (*Store, error) {
	pipe, err := redispipe.Open(url)
	if err != nil {
		// redisconn's errors do not echo the URL, so no password leaks.
		return nil, fmt.Errorf("redisclaim: parse url: %w", err)
	}
	return &Store{pipe: pipe, prefix: prefix}, nil
}

// Ping runs a round trip to Redis (a readiness probe).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pipe.Client().Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: ping: %w", err)
	}
	return nil
}

// Key returns the Redis key holding scope/key's claim:
// <prefix>claim:<scope>:<key>, with long keys hashed so the key stays bounded.
func (s *Store) Key(scope, key string) string {
	if len(key) > maxRawKey {
		sum := sha256.Sum256([]byte(key))
		key = "sha256:" + hex.EncodeToString(sum[:])
	}
	return s.prefix + "claim:" + scope + ":" + key
}

// Claim takes scope/key for ttl with SET NX PX; false means someone holds it.
// ttl must be positive: a claim that never expires would lock a key forever
// after a crash.
func (s *Store) Claim(ctx context.Context, scope, key string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, fmt.Errorf("redisclaim: claim %s: ttl %v must be positive", scope, ttl)
	}
	// SET key 1 PX ttl NX: atomic test-and-take with the expiry attached,
	// so a crash between taking and expiring cannot leave a permanent key.
	ms := max(ttl.Milliseconds(), 1)
	cmd := redis.NewBoolCmd(ctx, "set", s.Key(scope, key), "1", "px", ms, "nx")
	if err := s.pipe.Do(ctx, cmd); err != nil {
		// cmd may still be in a running pipeline: leave it alone.
		return false, fmt.Errorf("redisclaim: claim %s: %w", scope, err)
	}
	ok, err := cmd.Result()
	if err != nil {
		return false, fmt.Errorf("redisclaim: claim %s: %w", scope, err)
	}
	return ok, nil
}

// Release frees scope/key. Releasing a key nobody holds is not an error.
func (s *Store) Release(ctx context.Context, scope, key string) error {
	if err := s.pipe.Client().Del(ctx, s.Key(scope, key)).Err(); err != nil {
		return fmt.Errorf("redisclaim: release %s: %w", scope, err)
	}
	return nil
}

// Close releases the store's use of the shared client; the last user's
// Close closes its connections.
func (s *Store) Close() error {
	if err := s.pipe.Close(); err != nil {
		return fmt.Errorf("redisclaim: close: %w", err)
	}
	return nil
}
