package comfyui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// newPool starts a pool over the peers with short bounds, closed at the
// end of the test.
func newPool(t *testing.T, concurrency int, peers ...*comfyuipeer.Peer) *comfyui.Pool {
	t.Helper()
	workers := make([]comfyui.WorkerConfig, 0, len(peers))
	for _, p := range peers {
		workers = append(workers, comfyui.WorkerConfig{URL: p.URL, Concurrency: concurrency})
	}
	return startPool(t, workers...)
}

// startPool starts a pool over workers with short bounds, closed at the end
// of the test, and waits for its catalog.
func startPool(t *testing.T, workers ...comfyui.WorkerConfig) *comfyui.Pool {
	t.Helper()
	cfg := comfyui.Config{
		Workers:         workers,
		RefreshInterval: time.Minute,
		ReconnectMax:    100 * time.Millisecond,
		RequestTimeout:  5 * time.Second,
		UnhealthyAfter:  time.Second,
	}
	return startPoolWith(t, cfg)
}

// startPoolWith starts a pool of cfg, closed at the end of the test, and
// waits for its catalog.
func startPoolWith(t *testing.T, cfg comfyui.Config) *comfyui.Pool {
	t.Helper()
	pool, err := comfyui.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool.Start()
	t.Cleanup(func() { pool.Close() })
	if _, err := pool.Catalog(context.Background()); err != nil {
		t.Fatal(err)
	}
	return pool
}

type output struct {
	jobs.OutputFile
	data []byte
}

// recorder is a jobs.Run whose callbacks record what the executor did.
type recorder struct {
	mu       sync.Mutex
	progress []jobs.Progress
	previews []string // content types
	outputs  []output
}

func (r *recorder) snapshot() ([]jobs.Progress, []string, []output) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]jobs.Progress(nil), r.progress...), append([]string(nil), r.previews...), append([]output(nil), r.outputs...)
}

// newRun builds an attempt of a new job over graph; assets are the
// account's assets by id (their file path is the id + ".png").
func newRun(t *testing.T, graph string, assets map[string][]byte) (*jobs.Run, *recorder) {
	t.Helper()
	var g workflow.Graph
	if err := json.Unmarshal([]byte(graph), &g); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	run := &jobs.Run{
		Job:       storage.Job{ID: uuid.NewString(), Attempt: 1, Workflow: json.RawMessage(graph)},
		Graph:     g,
		ExtraData: map[string]string{"api_key_comfy_org": "secret"},
		OpenAsset: func(ctx context.Context, assetID, fileName string) (storage.Asset, io.ReadCloser, error) {
			for id, data := range assets {
				if id == assetID || id+".png" == fileName {
					return storage.Asset{ID: id, FilePath: id + ".png"}, io.NopCloser(bytes.NewReader(data)), nil
				}
			}
			return storage.Asset{}, nil, storage.ErrNotFound
		},
		Progress: func(ctx context.Context, p jobs.Progress) {
			rec.mu.Lock()
			rec.progress = append(rec.progress, p)
			rec.mu.Unlock()
		},
		Preview: func(nodeID, contentType string, data []byte) {
			rec.mu.Lock()
			rec.previews = append(rec.previews, nodeID+" "+contentType)
			rec.mu.Unlock()
		},
		Output: func(ctx context.Context, f jobs.OutputFile) error {
			rc, err := f.Open(ctx)
			if err != nil {
				return err
			}
			defer rc.Close()
			data, err := io.ReadAll(rc)
			if err != nil {
				return err
			}
			rec.mu.Lock()
			rec.outputs = append(rec.outputs, output{f, data})
			rec.mu.Unlock()
			return nil
		},
	}
	return run, rec
}

// gradientPNG is a w×h RGB test image.
func gradientPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	im := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			im.Set(x, y, color.NRGBA{uint8(x * 9), uint8(y * 13), uint8(x + y), 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, im); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// comfyInvert is what ComfyUI writes for an inverted 8-bit value.
func comfyInvert(v uint8) uint8 {
	x := float32(v) / 255
	return uint8(float32(255) * (1 - x))
}

// eventually polls cond until it holds or the test's bound passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runAsync runs Execute in the background.
func runAsync(ctx context.Context, pool *comfyui.Pool, run *jobs.Run) <-chan error {
	done := make(chan error, 1)
	go func() { done <- pool.Execute(ctx, run) }()
	return done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Execute did not return")
		return nil
	}
}
