package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// The fault matrix (issue 37). Every write method of the store is run
// once to count the statements it sends, and then again, on fresh
// records, once for each of those statements and each FaultKind, with the
// fault armed at that statement. After each run the invariants that a
// crash or a failover must never break are checked:
//
//   - every record that exists has its bytes;
//   - an acknowledged write (nil error) is wholly there;
//   - a write answered as having had no effect (storage.ErrNotSent or
//     storage.ErrNotCommitted: the idempotency layer then releases the
//     key and the client's retry runs) is wholly absent;
//   - any other answer leaves the write wholly there or wholly absent,
//     never half done (a lease without its status, outputs of two
//     attempts, a reservation without its entry);
//   - after one maintenance pass (RemoveUnreferencedBlobs, then
//     RemoveOrphanBlobs over the blob store's listing) no bytes are left
//     that no record names.
//
// The statement a fault hits is named by the backend (its SQL), and the
// outcome of every run is collected into a matrix that the test logs and
// that RELIABILITY.md reproduces.

// FaultKind is what a fault does to the statement it is armed for.
type FaultKind int

const (
	// FaultRefuse: the database answers the statement with an error; a
	// refused COMMIT rolls its transaction back.
	FaultRefuse FaultKind = iota + 1
	// FaultLose: the statement never reaches the database, and no answer
	// comes (a connection cut before it went out).
	FaultLose
	// FaultLoseAnswer: the database runs the statement (a COMMIT
	// commits) and its answer never comes.
	FaultLoseAnswer
)

// FaultKinds lists every kind, in the matrix's order.
var FaultKinds = []FaultKind{FaultRefuse, FaultLose, FaultLoseAnswer}

func (k FaultKind) String() string {
	switch k {
	case FaultRefuse:
		return "refused"
	case FaultLose:
		return "lost"
	case FaultLoseAnswer:
		return "answer lost"
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// Faults is a backend's fault injector on the connection its store writes
// through.
type Faults interface {
	// Arm makes the n-th statement (from 1) the store sends from now on
	// fail as kind says, once.
	Arm(n int, kind FaultKind)
	// Disarm cancels the fault if it has not fired, starts the count
	// again, and returns the statement the fault hit ("" if none).
	Disarm() string
	// Sent reports how many statements the store sent since the last Arm
	// or Disarm.
	Sent() int
}

// FaultMatrixEnv names a directory: when it is set, RunFaults writes its
// summary there as fault-matrix-<backend>.md (docs/reliability holds the
// committed ones).
const FaultMatrixEnv = "COMFYGATE_FAULT_MATRIX_DIR"

// RunFaults runs the fault matrix on backend. open returns a fresh,
// migrated store writing through faults; it is called once, and every run
// works on records of its own in it.
func RunFaults(t *testing.T, backend string, open func(t *testing.T) (storage.Store, Faults)) {
	t.Helper()
	var matrix faultMatrix
	st, faults := open(t)
	for _, sc := range faultScenarios {
		t.Run(sc.name, func(t *testing.T) {
			runScenario(t, st, faults, sc, &matrix)
		})
	}
	t.Logf("fault matrix: %d write methods, %d runs\n%s", len(faultScenarios), matrix.runs(), matrix.String())
	if dir := os.Getenv(FaultMatrixEnv); dir != "" && !t.Failed() {
		path := filepath.Join(dir, "fault-matrix-"+backend+".md")
		if err := os.WriteFile(path, []byte(matrix.summary(backend)), 0o644); err != nil {
			t.Errorf("writing the summary: %v", err)
		}
	}
}

// faultScenario is one write method under the matrix.
type faultScenario struct {
	name string
	// prepare makes the records the write works on (no fault armed) and
	// returns the write.
	prepare func(t *testing.T, e *faultEnv) faultWrite
}

// faultWrite is one prepared write and how to judge what it left.
type faultWrite struct {
	do func(ctx context.Context) error
	// effect reports whether the write's effect is there, failing t when
	// what it finds is neither wholly there nor wholly absent. A write
	// made of independent parts (partial true) is judged part by part:
	// effect then reports whether every part is there, and fails t only
	// for a part that is half done.
	effect  func(t *testing.T) bool
	partial bool
	// creates is set for a create that publishes bytes: one known not to
	// have committed must retract its own object at once.
	creates bool
}

// faultEnv is what one run works on: records of its own in the shared
// store, and a blob store of its own.
type faultEnv struct {
	st      storage.Store
	fs      *fakeFS
	account string
	pool    string
	// assets are every asset the run created or may create: the bytes
	// invariants are checked over them.
	mu     sync.Mutex
	assets []storage.Asset
}

// track adds an asset (account and id, at least) to the run's records.
func (e *faultEnv) track(a storage.Asset) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.assets = append(e.assets, a)
}

func newFaultEnv(st storage.Store) *faultEnv {
	return &faultEnv{st: st, fs: newFakeFS(), account: newID(), pool: newID()}
}

func runScenario(t *testing.T, st storage.Store, faults Faults, sc faultScenario, matrix *faultMatrix) {
	// The dry run: no fault; it must succeed, and it counts statements.
	dry := newFaultEnv(st)
	w := sc.prepare(t, dry)
	faults.Disarm()
	err := w.do(ctx(t))
	n := faults.Sent()
	if err != nil {
		t.Fatalf("without a fault: %v", err)
	}
	if !w.effect(t) {
		t.Fatal("without a fault: the write's effect is not there")
	}
	if n == 0 {
		t.Fatal("the write sent no statement through the fault injector")
	}
	checkBytes(t, dry)
	for i := 1; i <= n; i++ {
		for _, kind := range FaultKinds {
			t.Run(fmt.Sprintf("%d-%s", i, strings.ReplaceAll(kind.String(), " ", "_")), func(t *testing.T) {
				e := newFaultEnv(st)
				w := sc.prepare(t, e)
				faults.Arm(i, kind)
				err := w.do(ctx(t))
				hit := faults.Disarm()
				present := w.effect(t)
				judge(t, w, err, present)
				if w.creates && (errors.Is(err, storage.ErrNotSent) || errors.Is(err, storage.ErrNotCommitted)) {
					checkRetracted(t, e)
				}
				checkBytes(t, e)
				matrix.add(sc.name, i, hit, kind, err, present)
			})
		}
	}
}

// judge checks the write's answer against what it left.
func judge(t *testing.T, w faultWrite, err error, present bool) {
	t.Helper()
	noEffect := errors.Is(err, storage.ErrNotSent) || errors.Is(err, storage.ErrNotCommitted)
	if w.partial {
		// Judged part by part in effect: the whole is there only when
		// acknowledged.
		if err == nil && !present {
			t.Errorf("acknowledged (nil error), but its effect is not wholly there")
		}
		return
	}
	switch {
	case err == nil && !present:
		t.Errorf("acknowledged (nil error), but its effect is not wholly there")
	case noEffect && present:
		t.Errorf("answered as having had no effect (%v), but its effect is there", err)
	}
}

// checkBytes runs one maintenance pass over the run's blob store and then
// checks that every live record the run knows has its bytes and that no
// bytes are left that none of them names.
func checkBytes(t *testing.T, e *faultEnv) {
	t.Helper()
	if _, err := e.st.RemoveUnreferencedBlobs(ctx(t), 1000, e.fs.remove); err != nil {
		t.Errorf("maintenance: RemoveUnreferencedBlobs: %v", err)
	}
	if _, err := e.st.RemoveOrphanBlobs(ctx(t), e.fs.list(), e.fs.remove); err != nil {
		t.Errorf("maintenance: RemoveOrphanBlobs: %v", err)
	}
	named := map[string]bool{}
	e.mu.Lock()
	assets := slicesClone(e.assets)
	e.mu.Unlock()
	for _, a := range assets {
		got, err := e.st.GetAsset(ctx(t), a.AccountID, a.ID)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Errorf("GetAsset(%s): %v", a.ID, err)
			continue
		}
		obj := got.Object()
		named[objectName(obj)] = true
		if !e.fs.hasObject(obj) {
			t.Errorf("asset %s survives without its bytes (%s)", a.ID, obj)
		}
	}
	for _, obj := range e.fs.list() {
		if !named[objectName(obj)] {
			t.Errorf("bytes %s left after the maintenance pass, named by no record", obj)
		}
	}
}

// checkRetracted checks, before any maintenance pass, that a write known
// not to have committed left no object at a fresh key that no record
// names: the create retracted what it had published.
func checkRetracted(t *testing.T, e *faultEnv) {
	t.Helper()
	named := map[string]bool{}
	e.mu.Lock()
	assets := slicesClone(e.assets)
	e.mu.Unlock()
	for _, a := range assets {
		if got, err := e.st.GetAsset(ctx(t), a.AccountID, a.ID); err == nil {
			named[objectName(got.Object())] = true
		}
	}
	for _, obj := range e.fs.list() {
		if obj.Key != "" && !named[obj.Key] {
			t.Errorf("object %s of a create that did not commit was left to the orphan sweep, not retracted", obj.Key)
		}
	}
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// list is the fake's blob.Store.List: every object, an object at its
// address by its hash and any other by its key.
func (f *fakeFS) list() []blob.Ref {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]blob.Ref, 0, len(f.objects))
	for _, o := range f.objects {
		if o.Key != "" {
			out = append(out, blob.Ref{Key: o.Key})
		} else {
			out = append(out, blob.Ref{Hash: o.Hash})
		}
	}
	sort.Slice(out, func(i, j int) bool { return objectName(out[i]) < objectName(out[j]) })
	return out
}

// faultMatrix collects the outcome of every run.
type faultMatrix struct {
	mu   sync.Mutex
	rows []faultRow
}

type faultRow struct {
	method string
	n      int
	hit    string
	kind   FaultKind
	answer string // "ok", "no effect", "unknown", or "refused"
	there  bool
}

func (m *faultMatrix) add(method string, n int, hit string, kind FaultKind, err error, present bool) {
	answer := "error"
	switch {
	case err == nil:
		answer = "ok"
	case errors.Is(err, storage.ErrNotSent), errors.Is(err, storage.ErrNotCommitted):
		answer = "no effect"
	case errors.Is(err, storage.ErrInDoubt):
		answer = "in doubt"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = append(m.rows, faultRow{method, n, hit, kind, answer, present})
}

func (m *faultMatrix) runs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows)
}

// String renders one line per method and statement: what each kind of
// fault there was answered, and whether the write was then there.
func (m *faultMatrix) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	for _, r := range m.rows {
		state := "absent"
		if r.there {
			state = "there"
		}
		hit := r.hit
		if hit == "" {
			hit = "(not reached)"
		}
		fmt.Fprintf(&b, "%s\t#%d %s\t%s\t→ %s, %s\n", r.method, r.n, hit, r.kind, r.answer, state)
	}
	return b.String()
}

// summary renders the matrix as markdown: one row per write method, and
// for the statements before its (first) COMMIT, the COMMIT itself and the
// statements after it (the removal of bytes that follows a commit), what
// each kind of fault there was answered and what it left, with counts.
func (m *faultMatrix) summary(backend string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	type cell map[string]int
	type row struct {
		name  string
		cells [3]cell
		runs  int
	}
	var rows []*row
	byName := map[string]*row{}
	phase := map[string]int{} // the method's phase so far: 0 before COMMIT, 1 at, 2 after
	last := map[string]int{}
	for _, r := range m.rows {
		w := byName[r.method]
		if w == nil {
			w = &row{name: r.method, cells: [3]cell{{}, {}, {}}}
			byName[r.method] = w
			rows = append(rows, w)
		}
		if r.n != last[r.method] {
			last[r.method] = r.n
			if phase[r.method] == 1 {
				phase[r.method] = 2
			}
		}
		p := phase[r.method]
		if strings.EqualFold(r.hit, "commit") && p == 0 {
			p, phase[r.method] = 1, 1
		}
		state := "absent"
		if r.there {
			state = "there"
		}
		w.cells[p][fmt.Sprintf("%s: %s, %s", r.kind, r.answer, state)]++
		w.runs++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Fault matrix: %s store\n\nGenerated by `%s=docs/reliability go test -run TestFaultMatrix ./storage/%s/` "+
		"(storage/storetest/faults.go); not edited by hand. %d write methods, %d runs: each statement of each write, "+
		"and its COMMIT, refused by the database, lost before it reached it, or run with its answer lost; every invariant "+
		"held in every run (a record has its bytes; an acknowledged write is there; one answered as without effect is not; "+
		"nothing half done; no bytes left that no record names after one maintenance pass; a create known not to have "+
		"committed retracts its object at once).\n\n"+
		"Each cell: fault kind: answer, what was then there (counts of runs). \"no effect\" is ErrNotSent or "+
		"ErrNotCommitted (the idempotency layer releases the key), \"in doubt\" ErrInDoubt, \"error\" any other error "+
		"(the key is kept).\n\n| write | statements before COMMIT | COMMIT | after COMMIT (bytes removed) |\n|---|---|---|---|\n",
		backend, FaultMatrixEnv, backend, len(rows), len(m.rows))
	for _, w := range rows {
		fmt.Fprintf(&b, "| %s (%d runs) |", w.name, w.runs)
		for _, c := range w.cells {
			keys := make([]string, 0, len(c))
			for k := range c {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s ×%d", k, c[k]))
			}
			if len(parts) == 0 {
				parts = []string{"—"}
			}
			fmt.Fprintf(&b, " %s |", strings.Join(parts, "; "))
		}
		b.WriteString("\n")
	}
	return b.String()
}
