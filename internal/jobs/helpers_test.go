package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/bus"
	"github.com/comfygate/comfygate/storage/embedded"
)

const testPool = "default"

// env is one isolated jobs world: an embedded store and a blob directory in
// temp dirs, an in-process hub and the built-in executor's catalog.
type env struct {
	store *embedded.Store
	blobs *blob.FileSystem
	hub   *bus.Hub
	exec  *BuiltinExecutor
	svc   *Service
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	blobs := blob.NewFileSystem(filepath.Join(t.TempDir(), "blobs"))
	if err := blobs.Init(); err != nil {
		t.Fatal(err)
	}
	hub := bus.NewHub()
	exec := &BuiltinExecutor{}
	svc := &Service{
		Store:     st,
		Blobs:     blobs,
		Bus:       hub,
		Catalog:   exec.Catalog,
		ExtraData: NewExtraDataCache(time.Hour),
		Config:    Config{Pool: testPool, Retention: time.Hour},
	}
	return &env{store: st, blobs: blobs, hub: hub, exec: exec, svc: svc}
}

// submitWatchedInvert stores a PNG as acct's "a.png", submits the invert
// workflow over it and subscribes to the job's events (cancelled at the
// end of the test).
func (e *env) submitWatchedInvert(t *testing.T) (storage.Job, *bus.Subscription) {
	t.Helper()
	_, pngBytes := testPNG(t)
	e.addAsset(t, "acct", "a.png", pngBytes)
	j, err := e.svc.Submit(context.Background(), "acct", submitBody(t, invertGraph("a.png")))
	if err != nil {
		t.Fatal(err)
	}
	sub := e.hub.Subscribe(j.ID)
	t.Cleanup(sub.Cancel)
	return j, sub
}

// addAsset stores data as an asset of account at filePath.
func (e *env) addAsset(t *testing.T, account, filePath string, data []byte) storage.Asset {
	t.Helper()
	up, err := e.blobs.NewUpload(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Abort()
	if _, err := up.Write(data); err != nil {
		t.Fatal(err)
	}
	hash, size, err := up.Finish()
	if err != nil {
		t.Fatal(err)
	}
	created, err := e.store.CreateAsset(context.Background(), storage.NewAsset{
		ID: uuid.NewString(), AccountID: account, Hash: hash, SizeBytes: size,
		ContentType: "image/png", FilePath: filePath,
	}, up)
	if err != nil {
		t.Fatal(err)
	}
	return created.Asset
}

// node is one API-format node.
type node struct {
	ClassType string         `json:"class_type"`
	Inputs    map[string]any `json:"inputs"`
}

func link(id string) []any { return []any{id, 0} }

func assetRef(id string) map[string]any {
	return map[string]any{"__type": "core/ASSET", "info": map[string]any{"id": id}}
}

// submitBody encodes a submit body around graph.
func submitBody(t *testing.T, graph map[string]node) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"workflow": graph})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// invertGraph loads image (a file name or a core/ASSET object), inverts it
// and saves it.
func invertGraph(image any) map[string]node {
	return map[string]node{
		"1": {"LoadImage", map[string]any{"image": image}},
		"2": {"ImageInvert", map[string]any{"image": link("1")}},
		"3": {"SaveImage", map[string]any{"images": link("2"), "filename_prefix": "inv"}},
	}
}

// testPNG returns a small opaque PNG with distinct pixels.
func testPNG(t *testing.T) (*image.NRGBA, []byte) {
	t.Helper()
	im := image.NewNRGBA(image.Rect(0, 0, 4, 3))
	for y := 0; y < 3; y++ {
		for x := 0; x < 4; x++ {
			im.SetNRGBA(x, y, color.NRGBA{R: uint8(x * 60), G: uint8(y * 100), B: uint8(10 + x*y*20), A: 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, im); err != nil {
		t.Fatal(err)
	}
	return im, buf.Bytes()
}

func wantAPIErr(t *testing.T, err error, status int, code string) *apierr.Error {
	t.Helper()
	e, ok := apierr.As(err)
	if !ok || e.Status != status || e.Code != code {
		t.Fatalf("error = %v, want %d %s", err, status, code)
	}
	return e
}

// nextEvent waits for the next event on sub that satisfies keep.
func nextEvent(t *testing.T, sub *bus.Subscription, keep func(bus.Event) bool) bus.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-sub.C:
			if keep(e) {
				return e
			}
		case <-timeout:
			t.Fatal("no matching event was published")
		}
	}
}

// noEvent checks that no event is waiting on sub.
func noEvent(t *testing.T, sub *bus.Subscription) {
	t.Helper()
	select {
	case e := <-sub.C:
		t.Fatalf("unexpected event %+v", e)
	default:
	}
}

func statusOf(t *testing.T, e bus.Event) string {
	t.Helper()
	var d struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(e.Data, &d); err != nil {
		t.Fatalf("status event data %s: %v", e.Data, err)
	}
	return d.Status
}
