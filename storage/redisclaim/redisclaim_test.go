package redisclaim_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/redisclaim"
	"github.com/comfygate/comfygate/storage/redistest"
	"github.com/comfygate/comfygate/storage/storetest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// freshStore returns a store on the test Redis under a prefix of its own.
func freshStore(t *testing.T) (*redisclaim.Store, string, string) {
	t.Helper()
	return freshStoreOn(t, pgtest.RedisURL(t))
}

// freshStoreOn is freshStore on the Redis at url.
func freshStoreOn(t *testing.T, url string) (*redisclaim.Store, string, string) {
	t.Helper()
	prefix := pgtest.KeyPrefix(t)
	st, err := redisclaim.New(url, prefix)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, url, prefix
}

func TestMain(m *testing.M) { redistest.Main(m) }

// The claim store's conformance suite on one server, a Cluster and a
// Sentinel set.
func TestConformance(t *testing.T) {
	for _, tp := range redistest.Topologies(pgtest.RedisURL) {
		t.Run(tp.Name, func(t *testing.T) {
			t.Parallel() // separate servers; the suites mostly wait
			url := tp.URL(t)
			storetest.RunClaims(t, func(t *testing.T) storage.ClaimStore {
				st, _, _ := freshStoreOn(t, url)
				return st
			})
		})
	}
}

// rawClient reads what the store wrote, to check the key layout.
func rawClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("ParseURL: %v", err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestKeyLayout: claims live at <prefix>claim:<scope>:<key> with the ttl
// attached, and long keys are hashed to a bounded length.
func TestKeyLayout(t *testing.T) {
	st, url, prefix := freshStore(t)
	rdb := rawClient(t, url)
	long := strings.Repeat("k", 300)
	sum := sha256.Sum256([]byte(long))
	tests := []struct {
		name, key, wantKey string
	}{
		{"short key verbatim", "abc", prefix + "claim:upload:abc"},
		{"64-byte key verbatim", strings.Repeat("x", 64), prefix + "claim:upload:" + strings.Repeat("x", 64)},
		{"long key hashed", long, prefix + "claim:upload:sha256:" + hex.EncodeToString(sum[:])},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := st.Key("upload", tc.key)
			if got != tc.wantKey {
				t.Fatalf("Key = %q, want %q", got, tc.wantKey)
			}
			ok, err := st.Claim(testCtx(t), "upload", tc.key, time.Hour)
			if err != nil || !ok {
				t.Fatalf("Claim = %v, %v", ok, err)
			}
			ttl, err := rdb.PTTL(testCtx(t), got).Result()
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			if ttl <= 0 || ttl > time.Hour {
				t.Errorf("PTTL(%s) = %v, want in (0, 1h]", got, ttl)
			}
		})
	}
}

// TestLongKeysStayDistinct: hashing must not merge different long keys.
func TestLongKeysStayDistinct(t *testing.T) {
	st, _, _ := freshStore(t)
	a, b := strings.Repeat("a", 100)+"1", strings.Repeat("a", 100)+"2"
	for _, k := range []string{a, b} {
		if ok, err := st.Claim(testCtx(t), "s", k, time.Minute); err != nil || !ok {
			t.Errorf("Claim(%q...) = %v, %v; want true, nil", k[:8], ok, err)
		}
	}
	if ok, err := st.Claim(testCtx(t), "s", a, time.Minute); err != nil || ok {
		t.Errorf("repeat Claim of a long key = %v, %v; want false, nil", ok, err)
	}
}

// TestErrorsFailClosed: an unreachable Redis or a bad ttl is an error, never
// a granted claim. New itself does not dial.
func TestErrorsFailClosed(t *testing.T) {
	down, err := redisclaim.New("redis://127.0.0.1:1/0?dial_timeout=1s", "x:")
	if err != nil {
		t.Fatalf("New on an unreachable server: %v (must not dial)", err)
	}
	t.Cleanup(func() { _ = down.Close() })
	up, _, _ := freshStore(t)

	tests := []struct {
		name string
		st   *redisclaim.Store
		ttl  time.Duration
	}{
		{"unreachable server", down, time.Minute},
		{"zero ttl", up, 0},
		{"negative ttl", up, -time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := tc.st.Claim(testCtx(t), "s", uuid.NewString(), tc.ttl)
			if err == nil || ok {
				t.Errorf("Claim = %v, %v; want false and an error", ok, err)
			}
		})
	}
	if err := down.Release(testCtx(t), "s", "k"); err == nil {
		t.Error("Release on an unreachable server: want an error")
	}
	if _, err := redisclaim.New("http://not-redis", "x:"); err == nil {
		t.Error("New with a non-redis URL: want an error")
	}
}

// Stores on one Redis share a client: closing one twice must not close it
// under the other.
func TestRepeatedCloseKeepsSharedClient(t *testing.T) {
	st, url, prefix := freshStore(t)
	other, err := redisclaim.New(url, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	_ = other.Close()
	ok, err := st.Claim(context.Background(), "scope", "after-close", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Claim after another store's repeated Close = %v, %v; want a win", ok, err)
	}
}
