package comfyui_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/comfyui"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

var affinityModels = []string{"a.safetensors", "b.safetensors", "c.safetensors"}

// affinityPool starts a pool over two model-holding peers with the given
// dispatch policy and affinity wait.
func affinityPool(t *testing.T, dispatch string, wait time.Duration) (*comfyui.Pool, [2]*comfyuipeer.Peer) {
	t.Helper()
	var peers [2]*comfyuipeer.Peer
	var workers []comfyui.WorkerConfig
	for i := range peers {
		peers[i] = comfyuipeer.New(t, comfyuipeer.Options{Models: affinityModels, ModelSlots: 2})
		workers = append(workers, comfyui.WorkerConfig{URL: peers[i].URL})
	}
	pool, err := comfyui.New(comfyui.Config{Workers: workers, ReconnectMax: 100 * time.Millisecond,
		RequestTimeout: 5 * time.Second, UnhealthyAfter: 2 * time.Second, Dispatch: dispatch, AffinityWait: wait,
		AffinityModels: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool.Start()
	t.Cleanup(func() { pool.Close() })
	if _, err := pool.Catalog(context.Background()); err != nil {
		t.Fatal(err)
	}
	return pool, peers
}

// modelJob loads model, then runs steps×step_ms.
func modelJob(model string, steps, stepMS int) string {
	return fmt.Sprintf(`{"1":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":%q}},`+
		`"2":{"class_type":"SlowNode","inputs":{"steps":%d,"step_ms":%d,"model":["1",0]}}}`, model, steps, stepMS)
}

func prompts(peers [2]*comfyuipeer.Peer) [2]int {
	return [2]int{peers[0].Stats().Prompts, peers[1].Stats().Prompts}
}

// An idle warm worker is preferred over an idle cold one, whichever is less
// loaded; the pool's view of a worker's models follows its executions.
func TestAffinityPrefersIdleWarmWorker(t *testing.T) {
	pool, peers := affinityPool(t, comfyui.DispatchAffinity, time.Second)
	ctx := context.Background()
	for range 3 {
		for _, m := range []string{"a.safetensors", "b.safetensors"} {
			run, _ := newRun(t, modelJob(m, 1, 0), nil)
			if err := pool.Execute(ctx, run); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The first a and the first b each loaded once somewhere; every repeat
	// found its model warm.
	loads := peers[0].Stats().ModelLoads + peers[1].Stats().ModelLoads
	if loads != 2 {
		t.Fatalf("%d model loads for 6 jobs over 2 models, want 2 (the first of each)", loads)
	}
	var believed []string
	for _, w := range pool.Workers() {
		believed = append(believed, w.Models...)
	}
	slices.Sort(believed)
	if !slices.Equal(believed, []string{"a.safetensors", "b.safetensors"}) {
		t.Fatalf("the pool believes the workers hold %v", believed)
	}
}

// A job whose model is warm on a busy worker waits for it (within
// affinity_wait) instead of loading it on the idle worker; with a short
// wait, or least_busy dispatch, it takes the idle worker.
func TestAffinityWaitsForWarmWorker(t *testing.T) {
	tests := []struct {
		name     string
		dispatch string
		wait     time.Duration
		onWarm   bool
	}{
		{"waits within affinity_wait", comfyui.DispatchAffinity, 20 * time.Second, true},
		{"never starves past affinity_wait", comfyui.DispatchAffinity, 50 * time.Millisecond, false},
		{"least_busy does not wait", comfyui.DispatchLeastBusy, 20 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool, peers := affinityPool(t, tt.dispatch, tt.wait)
			ctx := context.Background()
			long, _ := newRun(t, modelJob("c.safetensors", 1, 1500), nil)
			first := runAsync(ctx, pool, long)
			var warm int
			eventually(t, "the first job running", func() bool {
				p := prompts(peers)
				warm = slices.Index(p[:], 1)
				return p[0]+p[1] == 1
			})
			second, _ := newRun(t, modelJob("c.safetensors", 1, 0), nil)
			if err := wait(t, runAsync(ctx, pool, second)); err != nil {
				t.Fatal(err)
			}
			if err := wait(t, first); err != nil {
				t.Fatal(err)
			}
			p := prompts(peers)
			if gotWarm := p[warm] == 2; gotWarm != tt.onWarm {
				t.Fatalf("prompts per worker %v (warm worker %d): second job on the warm worker = %v, want %v", p, warm, gotWarm, tt.onWarm)
			}
			loads := peers[0].Stats().ModelLoads + peers[1].Stats().ModelLoads
			if want := map[bool]int{true: 1, false: 2}[tt.onWarm]; loads != want {
				t.Fatalf("%d model loads, want %d", loads, want)
			}
		})
	}
}

// What the pool believes a worker holds is forgotten when the worker
// restarts and when the pool frees it.
func TestAffinityForgetsOnRestartAndFree(t *testing.T) {
	pool, peers := affinityPool(t, comfyui.DispatchAffinity, time.Second)
	ctx := context.Background()
	held := func() map[string][]string {
		m := map[string][]string{}
		for _, w := range pool.Workers() {
			m[w.URL] = w.Models
		}
		return m
	}
	for _, p := range peers {
		_ = p
		run, _ := newRun(t, modelJob("a.safetensors", 1, 0), nil)
		if err := pool.Execute(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	var holder int
	for i, p := range peers {
		if len(held()[p.URL]) == 1 {
			holder = i
		}
	}
	if len(held()[peers[holder].URL]) != 1 {
		t.Fatalf("models believed %v", held())
	}
	if err := pool.Free(ctx, peers[holder].URL); err != nil {
		t.Fatal(err)
	}
	if got := held()[peers[holder].URL]; len(got) != 0 || peers[holder].Stats().Frees != 1 || len(peers[holder].Models()) != 0 {
		t.Fatalf("after Free: believed %v, peer frees %d, peer memory %v", got, peers[holder].Stats().Frees, peers[holder].Models())
	}
	run, _ := newRun(t, modelJob("b.safetensors", 1, 0), nil)
	if err := pool.Execute(ctx, run); err != nil {
		t.Fatal(err)
	}
	var bHolder *comfyuipeer.Peer
	for _, p := range peers {
		if slices.Contains(held()[p.URL], "b.safetensors") {
			bHolder = p
		}
	}
	if bHolder == nil {
		t.Fatalf("no worker believed to hold b: %v", held())
	}
	sockets := bHolder.Stats().Sockets
	bHolder.Restart()
	eventually(t, "the restarted worker's socket back", func() bool { return bHolder.Stats().Sockets > sockets })
	eventually(t, "its models forgotten", func() bool { return len(held()[bHolder.URL]) == 0 })
}
