package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/comfygate/comfygate/storage"
)

// testFairAdmission runs FairAdmission on the one store.
func testFairAdmission(t *testing.T, st storage.Store) { FairAdmission(t, st) }

// FairAdmission walks one pool (MaxQueued 20) through every tier of the
// storage package's fair-admission rule, each step a burst of concurrent
// creates spread over stores (several Stores on one database stand for
// several gateways): the counts admitted must be exact, so a backend that
// lets concurrent creates pass a bound fails it. A backend's own tests
// call it with more than one Store.
func FairAdmission(t *testing.T, stores ...storage.Store) {
	const m = 20
	pool := newID()
	accounts := map[string]string{}
	account := func(name string) string {
		if accounts[name] == "" {
			accounts[name] = name + "-" + newID()
		}
		return accounts[name]
	}
	// burst submits tries jobs for each of names at once and returns how
	// many each got in and the bounds that refused the others.
	burst := func(tries int, names ...string) (map[string]int, map[string]int) {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			ok      = map[string]int{}
			refused = map[string]int{}
		)
		n := 0
		for _, name := range names {
			id := account(name) // before the goroutines: account is not safe for them
			for range tries {
				st := stores[n%len(stores)]
				n++
				wg.Add(1)
				go func() {
					defer wg.Done()
					j := newJob(id, pool)
					j.MaxQueued = m
					_, err := st.CreateJob(ctx(t), j)
					bound, _, full := storage.QueueBound(err)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						ok[name]++
					case full:
						refused[bound]++
					default:
						t.Errorf("CreateJob for %s: %v", name, err)
					}
				}()
			}
		}
		wg.Wait()
		return ok, refused
	}
	steps := []struct {
		name        string
		tries       int
		accounts    []string
		wantEach    int    // admitted per account
		wantRefused string // the bound that refused the rest
		wantQueued  int
	}{
		{"R alone, below max_queued", 10, []string{"r"}, 10, "", 10},
		{"B up to the pool's 20, then its share of 10", 40, []string{"b"}, 10, storage.BoundFairShare, 20},
		{"R at its share", 5, []string{"r"}, 0, storage.BoundFairShare, 20},
		{"C: a first job, then up to its share of 6", 20, []string{"c"}, 6, storage.BoundFairShare, 26},
		{"D: under its share of 5, stopped at the overflow (30)", 20, []string{"d"}, 4, storage.BoundOverflow, 30},
		{"ten newcomers: one first job each, up to the ceiling", 3,
			[]string{"e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9"}, 1, "", 40},
		{"at the ceiling even a first job", 3, []string{"f"}, 0, storage.BoundCeiling, 40},
	}
	queued := 0
	for _, s := range steps {
		ok, refused := burst(s.tries, s.accounts...)
		for _, name := range s.accounts {
			if ok[name] != s.wantEach {
				t.Errorf("%s: %s got %d in, want %d (admitted %v, refused by %v)", s.name, name, ok[name], s.wantEach, ok, refused)
			}
			queued += ok[name]
		}
		if s.wantRefused != "" && refused[s.wantRefused] != s.tries*len(s.accounts)-s.wantEach*len(s.accounts) {
			t.Errorf("%s: refused by %v, want every refusal by %s", s.name, refused, s.wantRefused)
		}
		if queued != s.wantQueued {
			t.Errorf("%s: %d queued, want %d", s.name, queued, s.wantQueued)
		}
		if t.Failed() {
			return
		}
	}
	// The listing agrees with the tallies.
	for name, id := range accounts {
		want := 0
		for _, s := range steps {
			for _, a := range s.accounts {
				if a == name {
					want += s.wantEach
				}
			}
		}
		if got := countQueued(t, stores[0], id, pool); got != want {
			t.Errorf("%s has %d queued, want %d", name, got, want)
		}
	}
	// A refusal is a QueueFullError that names its bound and limit.
	j := newJob(account("r"), pool)
	j.MaxQueued = m
	_, err := stores[0].CreateJob(ctx(t), j)
	var qe *storage.QueueFullError
	if !errors.As(err, &qe) || qe.Bound != storage.BoundCeiling || qe.Limit != 2*m || errors.Is(err, storage.ErrAccountQueueFull) {
		t.Errorf("over the ceiling: %v, want a ceiling QueueFullError with limit %d", err, 2*m)
	}
}
