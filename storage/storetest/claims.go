package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// RunClaims runs the storage.ClaimStore conformance suite. open is called
// once per subtest and must register Close with t.Cleanup. Scopes and keys
// are random per subtest, so a shared backend (one Redis) is safe.
func RunClaims(t *testing.T, open func(t *testing.T) storage.ClaimStore) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, cs storage.ClaimStore)
	}{
		{"ClaimOnce", testClaimOnce},
		{"ReleaseThenReclaim", testReleaseThenReclaim},
		{"ReleaseUnclaimed", testReleaseUnclaimed},
		{"ScopesAndKeysIndependent", testScopesAndKeysIndependent},
		{"Expiry", testClaimExpiry},
		{"ConcurrentClaims", testConcurrentClaims},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := open(t)
			if cs == nil {
				t.Fatal("open returned a nil claim store")
			}
			c.run(t, cs)
		})
	}
}

// claim takes scope/key and fails the test on error.
func claim(t *testing.T, cs storage.ClaimStore, scope, key string, ttl time.Duration) bool {
	t.Helper()
	ok, err := cs.Claim(ctx(t), scope, key, ttl)
	if err != nil {
		t.Fatalf("Claim(%s, %s): %v", scope, key, err)
	}
	return ok
}

func testClaimOnce(t *testing.T, cs storage.ClaimStore) {
	scope, key := "scope-"+newID(), newID()
	if !claim(t, cs, scope, key, time.Minute) {
		t.Fatal("first Claim = false, want true")
	}
	for i := range 3 {
		if claim(t, cs, scope, key, time.Minute) {
			t.Errorf("repeat Claim #%d = true, want false", i+1)
		}
	}
}

func testReleaseThenReclaim(t *testing.T, cs storage.ClaimStore) {
	scope, key := "scope-"+newID(), newID()
	if !claim(t, cs, scope, key, time.Minute) {
		t.Fatal("first Claim = false")
	}
	if err := cs.Release(ctx(t), scope, key); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !claim(t, cs, scope, key, time.Minute) {
		t.Error("Claim after Release = false, want true")
	}
	if claim(t, cs, scope, key, time.Minute) {
		t.Error("Claim after re-claim = true, want false")
	}
}

func testReleaseUnclaimed(t *testing.T, cs storage.ClaimStore) {
	scope, key := "scope-"+newID(), newID()
	if err := cs.Release(ctx(t), scope, key); err != nil {
		t.Fatalf("Release of an unclaimed key: %v", err)
	}
	if !claim(t, cs, scope, key, time.Minute) {
		t.Error("Claim after releasing an unclaimed key = false")
	}
}

func testScopesAndKeysIndependent(t *testing.T, cs storage.ClaimStore) {
	s1, s2 := "scope-"+newID(), "scope-"+newID()
	k1, k2 := newID(), newID()
	steps := []struct {
		scope, key string
		want       bool
	}{
		{s1, k1, true},
		{s2, k1, true},  // same key, other scope
		{s1, k2, true},  // other key, same scope
		{s1, k1, false}, // held
		{s2, k1, false}, // held
	}
	for i, s := range steps {
		if got := claim(t, cs, s.scope, s.key, time.Minute); got != s.want {
			t.Errorf("step %d: Claim(%s, %s) = %v, want %v", i, s.scope, s.key, got, s.want)
		}
	}
	if err := cs.Release(ctx(t), s1, k1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if claim(t, cs, s2, k1, time.Minute) {
		t.Error("Release in one scope freed the key in another")
	}
}

// testClaimExpiry checks that a claim lapses after its ttl. It waits twice
// the ttl: an expiry check with generous margin, not a timing assertion.
func testClaimExpiry(t *testing.T, cs storage.ClaimStore) {
	const ttl = 1500 * time.Millisecond
	scope, key, longKey := "scope-"+newID(), newID(), newID()
	if !claim(t, cs, scope, key, ttl) || !claim(t, cs, scope, longKey, time.Hour) {
		t.Fatal("first Claim = false")
	}
	if claim(t, cs, scope, key, ttl) {
		t.Fatal("Claim before expiry = true")
	}
	time.Sleep(2 * ttl)
	if !claim(t, cs, scope, key, ttl) {
		t.Error("Claim after the ttl elapsed = false, want true")
	}
	if claim(t, cs, scope, longKey, time.Hour) {
		t.Error("a claim with a long ttl lapsed early")
	}
}

func testConcurrentClaims(t *testing.T, cs storage.ClaimStore) {
	const n = 50
	scope, key := "scope-"+newID(), newID()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := cs.Claim(ctx(t), scope, key, time.Minute)
			if err != nil {
				t.Errorf("Claim: %v", err)
				return
			}
			if ok {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d of %d concurrent claims won, want exactly 1", wins, n)
	}
	// Concurrent claims of distinct keys (taken twice each) get their own
	// answers: a store that sends claims together must not mix them up.
	keys := make([]string, n)
	for i := range keys {
		keys[i] = newID()
		if i%2 == 0 && !claim(t, cs, scope, keys[i], time.Minute) {
			t.Fatalf("claim of fresh key %d failed", i)
		}
	}
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := cs.Claim(ctx(t), scope, k, time.Minute)
			if err != nil || ok != (i%2 == 1) {
				t.Errorf("concurrent Claim of key %d (taken before: %v) = %v, %v", i, i%2 == 0, ok, err)
			}
		}()
	}
	wg.Wait()
}
