package comfyui_test

import (
	"testing"
	"time"

	"github.com/comfygate/comfygate/modules/comfyui"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestReconnectBacksOffAfterImmediateDrops: a worker whose sockets are
// closed right after the upgrade must be redialed with a growing backoff,
// not in a tight loop.
func TestReconnectBacksOffAfterImmediateDrops(t *testing.T) {
	seen, done, restore := comfyui.RecordReconnectSleeps(5)
	defer restore()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	peer.Set(func(s *comfyuipeer.Switches) { s.CloseSocketsOnAccept = true })
	pool, err := comfyui.New(comfyui.Config{
		Workers:      []comfyui.WorkerConfig{{URL: peer.URL}},
		ReconnectMax: 10 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool.Start()
	defer pool.Close()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the pool waited %v between reconnects; want 5 waits", seen())
	}
	waits := seen()
	for i := 1; i < len(waits); i++ {
		if waits[i] <= waits[i-1] {
			t.Fatalf("reconnect waits %v do not grow", waits)
		}
	}
	if s := peer.Stats(); s.Sockets > 6 {
		t.Errorf("%d sockets for 5 waits: the pool redials without waiting", s.Sockets)
	}
}
