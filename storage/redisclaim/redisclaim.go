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
	"crypto/rand"
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
//
// The claim's value is a token of this call's own, because the SET's
// answer can be lost after Redis ran it (a connection cut, a failover):
// the client then sends it again, and the retry finds the key taken by
// this very call. A claim found held is therefore read back, and the call
// holds it when the value is its token. When no answer comes at all, the
// call removes its own claim again (only if it is still its token), so
// that a failed request does not leave its key taken for a day with
// nothing under it.
func (s *Store) Claim(ctx context.Context, scope, key string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, fmt.Errorf("redisclaim: claim %s: ttl %v must be positive", scope, ttl)
	}
	// SET key token PX ttl NX: atomic test-and-take with the expiry
	// attached, so a crash between taking and expiring cannot leave a
	// permanent key.
	ms := max(ttl.Milliseconds(), 1)
	k, token := s.Key(scope, key), newToken()
	cmd := redis.NewBoolCmd(ctx, "set", k, token, "px", ms, "nx")
	if err := s.pipe.Do(ctx, cmd); err != nil {
		// cmd may still be in a running pipeline: leave it alone.
		return false, fmt.Errorf("redisclaim: claim %s: %w", scope, err)
	}
	ok, err := cmd.Result()
	if err != nil {
		s.dropOwn(ctx, k, token)
		return false, fmt.Errorf("redisclaim: claim %s: %w", scope, err)
	}
	if !ok {
		held, err := s.pipe.Client().Get(ctx, k).Result()
		if err == nil && held == token {
			return true, nil // this call's own SET, answered the second time
		}
	}
	return ok, nil
}

// dropOwnScript deletes KEYS[1] only while its value is ARGV[1].
var dropOwnScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

// dropOwn removes a claim this call may have taken without learning it,
// on a context of its own (the request's may be what ended). Its failure
// leaves the claim to its expiry.
func (s *Store) dropOwn(ctx context.Context, k, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropOwnTimeout)
	defer cancel()
	_ = dropOwnScript.Run(ctx, s.pipe.Client(), []string{k}, token).Err()
}

// dropOwnTimeout bounds dropOwn.
const dropOwnTimeout = 3 * time.Second

// newToken is a claim's value: 128 random bits.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
