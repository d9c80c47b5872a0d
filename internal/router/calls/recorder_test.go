package calls

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/storage"
)

// flakyStore is a batch writer that fails until healthy is set.
type flakyStore struct {
	mu      sync.Mutex
	healthy bool
	// healAt, when set, makes writes succeed once it is closed.
	healAt   <-chan struct{}
	attempts int
	written  map[string]bool
}

func (s *flakyStore) write(_ context.Context, recs []storage.RouterCall) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if s.healAt != nil {
		select {
		case <-s.healAt:
			s.healthy = true
		default:
		}
	}
	if !s.healthy {
		return errors.New("database restarting")
	}
	for _, r := range recs {
		s.written[r.RequestID] = true
	}
	return nil
}

func (s *flakyStore) state() (attempts int, written int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts, len(s.written)
}

func (s *flakyStore) heal() {
	s.mu.Lock()
	s.healthy = true
	s.mu.Unlock()
}

// TestRecorderRetriesFailedBatches: a batch whose write fails is kept and
// retried until it is written, and a batch still failing at close gets one
// last try then.
func TestRecorderRetriesFailedBatches(t *testing.T) {
	for _, c := range []struct {
		name      string
		healFirst bool // heal before close (retries land) or only at close (last try lands)
	}{{"retried while running", true}, {"last try at close", false}} {
		t.Run(c.name, func(t *testing.T) {
			st := &flakyStore{written: map[string]bool{}}
			r := newRecorder(st.write, zap.NewNop())
			if !c.healFirst {
				st.mu.Lock()
				st.healAt = r.closing // the store recovers exactly when close starts
				st.mu.Unlock()
			}
			for _, id := range []string{"a", "b", "c"} {
				r.enqueue(storage.RouterCall{RequestID: id, State: storage.RouterAnswered})
			}
			waitFor(t, 5*time.Second, "a second attempt", func() bool {
				n, _ := st.state()
				return n >= 2
			})
			if _, w := st.state(); w != 0 {
				t.Fatalf("%d written while the store fails", w)
			}
			if c.healFirst {
				st.heal()
				waitFor(t, 10*time.Second, "the retried write", func() bool {
					_, w := st.state()
					return w == 3
				})
				r.close()
				return
			}
			// close: the pending batch gets its final attempt, which now works.
			r.close()
			if _, w := st.state(); w != 3 {
				t.Errorf("%d of 3 records written by close", w)
			}
		})
	}
}
