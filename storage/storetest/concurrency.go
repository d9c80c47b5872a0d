package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// concurrencyCases check that the blob reference protocol holds when creates
// and deletes of the same bytes race: the store, not luck, orders them.
var concurrencyCases = []storeCase{
	{"CreateDeleteSameHash", testCreateDeleteSameHash},
	{"ConcurrentDedupExactlyOneNew", testConcurrentDedupExactlyOneNew},
	{"ConcurrentIdempotencyKey", testConcurrentIdempotencyKey},
}

// testCreateDeleteSameHash races creates and deletes over a few shared hashes,
// two workers per hash, so that reference counts cross zero often. The fake
// file system sleeps inside publish and remove to widen the window in which a
// store that does not hold the blob's record across them would let a delete
// remove bytes a concurrent create has just re-referenced. While a worker's
// asset exists its bytes must be present; that is checked after every create
// and before every delete, and again at the end for the survivors.
func testCreateDeleteSameHash(t *testing.T, st storage.Store) {
	const workers, rounds = 12, 16
	fs := newFakeFS()
	fs.publishHold, fs.removeHold = time.Millisecond, 3*time.Millisecond
	accounts := []string{newID(), newID()}
	hashes := make([]string, workers/2)
	for i := range hashes {
		hashes[i] = hashOf(fmt.Sprint("race-", i))
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		live []storage.Asset
	)
	errs := make(chan error, workers*rounds*4)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hash := hashes[w%len(hashes)]
			for r := range rounds {
				a := newAsset(accounts[(w+r)%len(accounts)], hash)
				c, err := st.CreateAsset(ctx(t), a, fs.publish(a.Hash))
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: CreateAsset: %w", w, r, err)
					continue
				}
				if !fs.has(hash) {
					errs <- fmt.Errorf("worker %d round %d: blob missing right after CreateAsset returned", w, r)
				}
				if r == rounds-1 && w%3 == 0 { // some survive to the end
					mu.Lock()
					live = append(live, c.Asset)
					mu.Unlock()
					continue
				}
				if !fs.has(hash) {
					errs <- fmt.Errorf("worker %d round %d: blob missing while its asset is live", w, r)
				}
				if err := st.DeleteAsset(ctx(t), a.AccountID, a.ID, fs.remove); err != nil {
					errs <- fmt.Errorf("worker %d round %d: DeleteAsset: %w", w, r, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assertFSMatches(t, st, fs, live)

	// Draining the survivors must remove every blob exactly when its last
	// reference goes.
	for _, a := range live {
		if err := st.DeleteAsset(ctx(t), a.AccountID, a.ID, fs.remove); err != nil {
			t.Errorf("DeleteAsset(%s): %v", a.ID, err)
		}
	}
	if left := fs.presentHashes(); len(left) != 0 {
		t.Errorf("blobs left after every asset was deleted: %v", left)
	}
}

// testConcurrentDedupExactlyOneNew creates many assets of one account over one
// hash at once: exactly one of them is the account's first.
func testConcurrentDedupExactlyOneNew(t *testing.T, st storage.Store) {
	const n = 16
	fs := newFakeFS()
	account, hash := newID(), hashOf("dedup-race")
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		firsts    int
		succeeded int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.CreateAsset(ctx(t), newAsset(account, hash), fs.publish(hash))
			if err != nil {
				t.Errorf("CreateAsset: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			succeeded++
			if !c.AccountHadBlob {
				firsts++
			}
		}()
	}
	wg.Wait()
	if succeeded == n && firsts != 1 {
		t.Errorf("%d of %d concurrent creates reported AccountHadBlob=false, want exactly 1", firsts, n)
	}
	if got := fs.publishCount(hash); got != succeeded {
		t.Errorf("publish called %d times for %d creates", got, succeeded)
	}
}

// testConcurrentIdempotencyKey races creates under one account and key: the
// row backstop lets exactly one through.
func testConcurrentIdempotencyKey(t *testing.T, st storage.Store) {
	const n = 16
	fs := newFakeFS()
	account, hash, key := newID(), hashOf("idem-race"), "idem-"+newID()
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		winners    []storage.Asset
		duplicates int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := newAsset(account, hash)
			a.IdempotencyKey = key
			c, err := st.CreateAsset(ctx(t), a, fs.publish(a.Hash))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, c.Asset)
			case errors.Is(err, storage.ErrDuplicate):
				duplicates++
			default:
				t.Errorf("CreateAsset: %v, want nil or storage.ErrDuplicate", err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 || duplicates != n-1 {
		t.Fatalf("%d creates succeeded and %d were duplicates, want 1 and %d", len(winners), duplicates, n-1)
	}
	// The losers leaked no reference: deleting the winner removes the blob.
	if err := st.DeleteAsset(ctx(t), account, winners[0].ID, fs.remove); err != nil {
		t.Fatalf("DeleteAsset: %v", err)
	}
	if n := fs.removeCount(hash); n != 1 || fs.has(hash) {
		t.Errorf("after deleting the only asset: remove calls=%d present=%v, want 1, false", n, fs.has(hash))
	}
}
