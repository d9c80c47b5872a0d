package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/bus"
)

// waitLimit bounds every wait on the dispatcher; it is a hang guard, not a
// timing assertion (the race detector makes the built-in nodes slow).
const waitLimit = 2 * time.Minute

// startDispatcher runs a dispatcher over e with exec and returns a stop
// function that cancels it and checks that Run returns and leaves no
// goroutines behind. stop is also registered as a cleanup.
func startDispatcher(t *testing.T, e *env, exec Executor, maxAttempts int) (stop func()) {
	t.Helper()
	before, subsBefore := runtime.NumGoroutine(), e.hub.Subscribers()
	d := &Dispatcher{
		Store: e.store, Blobs: e.blobs, Bus: e.hub, Exec: exec, ExtraData: e.svc.ExtraData,
		Config: DispatcherConfig{
			Pool: testPool, Concurrency: 2, Lease: 2 * time.Second, MaxAttempts: maxAttempts,
			RunningBound: time.Hour, PollInterval: 50 * time.Millisecond,
		},
		Owner:  "test-owner",
		Logger: zaptest.NewLogger(t),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(waitLimit):
			t.Fatal("Dispatcher.Run did not return after its context was canceled")
		}
		// Goroutines wind down asynchronously (sql connection closers,
		// timers); poll until the count is back near where it was.
		deadline := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > before+2 {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Fatalf("goroutines leaked: %d before, %d after stop\n%s", before, runtime.NumGoroutine(), buf[:n])
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n := e.hub.Subscribers(); n != subsBefore {
			t.Fatalf("%d bus subscriptions open after stop, %d before start", n, subsBefore)
		}
	}
	t.Cleanup(stop)
	return stop
}

// watchJob collects a job's events until a terminal status event.
type watchJob struct {
	statuses []string
	progress []Progress
	outputs  int
}

func collect(t *testing.T, sub *bus.Subscription) watchJob {
	t.Helper()
	var w watchJob
	timeout := time.After(waitLimit)
	for {
		select {
		case ev := <-sub.C:
			switch ev.Kind {
			case "status":
				s := statusOf(t, ev)
				w.statuses = append(w.statuses, s)
				if storage.Terminal(s) {
					if sub.Lagged() {
						t.Fatal("the test subscription lagged; events were dropped")
					}
					return w
				}
			case "progress":
				var p Progress
				if err := json.Unmarshal(ev.Data, &p); err != nil {
					t.Fatalf("progress data %s: %v", ev.Data, err)
				}
				w.progress = append(w.progress, p)
			case "output":
				w.outputs++
			}
		case <-timeout:
			t.Fatalf("no terminal status; saw %v", w.statuses)
		}
	}
}

// checkProgressMonotonic fails when a progress value or nodes_done decreases.
func checkProgressMonotonic(t *testing.T, ps []Progress) {
	t.Helper()
	for i := 1; i < len(ps); i++ {
		if ps[i].Value < ps[i-1].Value || ps[i].NodesDone < ps[i-1].NodesDone {
			t.Fatalf("progress went backwards at %d: %+v after %+v", i, ps[i], ps[i-1])
		}
	}
	for _, p := range ps {
		if p.Value < 0 || p.Value > 1 || p.NodesDone > p.NodesTotal {
			t.Fatalf("progress out of range: %+v", p)
		}
	}
}

// waitStatus polls the job until its status is one of want.
func waitStatus(t *testing.T, e *env, account, id string, want ...string) storage.Job {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		j, err := e.store.GetJob(context.Background(), account, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if j.Status == w {
				return j
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s, want one of %v", id, j.Status, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDispatcherRunsInvert(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	src, pngBytes := testPNG(t)
	a := e.addAsset(t, "acct", "in.png", pngBytes)
	j, err := e.svc.Submit(ctx, "acct", submitBody(t, invertGraph(assetRef(a.ID))))
	if err != nil {
		t.Fatal(err)
	}
	sub := e.hub.Subscribe(j.ID)
	defer sub.Cancel()
	stop := startDispatcher(t, e, e.exec, 3)

	w := collect(t, sub)
	if strings.Join(w.statuses, ",") != "running,succeeded" {
		t.Fatalf("statuses = %v", w.statuses)
	}
	checkProgressMonotonic(t, w.progress)
	if len(w.progress) == 0 || w.progress[len(w.progress)-1].Value != 1 {
		t.Fatalf("progress events = %+v, want them to end at 1", w.progress)
	}
	if w.outputs != 1 {
		t.Fatalf("%d output events, want 1", w.outputs)
	}
	stop()

	done, err := e.store.GetJob(ctx, "acct", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != storage.JobSucceeded || done.StartedAt == nil || done.CompletedAt == nil || len(done.Error) != 0 {
		t.Fatalf("job = %+v", done)
	}
	var p Progress
	if err := json.Unmarshal(done.Progress, &p); err != nil || p.NodesDone != p.NodesTotal || p.NodesTotal != 3 {
		t.Fatalf("stored progress %s: %v", done.Progress, err)
	}
	if len(done.Outputs) != 1 {
		t.Fatalf("%d outputs, want 1", len(done.Outputs))
	}
	out := done.Outputs[0]
	if out.NodeID != "3" || out.Type != "image" || out.Asset.ContentType != "image/png" ||
		out.Asset.JobID != j.ID || out.Asset.AccountID != "acct" || !strings.HasPrefix(out.Asset.FilePath, j.ID+"/") {
		t.Fatalf("output = %+v", out)
	}
	f, _, err := e.blobs.Open(context.Background(), out.Asset.Object(), 0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("output is not a PNG: %v", err)
	}
	checkInverted(t, src, img)
}

// checkInverted compares every pixel of got with 255 minus src's, allowing
// one unit for the float round trip.
func checkInverted(t *testing.T, src image.Image, got image.Image) {
	t.Helper()
	if got.Bounds().Size() != src.Bounds().Size() {
		t.Fatalf("output size %v, want %v", got.Bounds().Size(), src.Bounds().Size())
	}
	near := func(a, b uint32) bool { d := int(a>>8) - int(b>>8); return d >= -1 && d <= 1 }
	b := src.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			sr, sg, sb, _ := src.At(x, y).RGBA()
			gr, gg, gb, _ := got.At(x-b.Min.X+got.Bounds().Min.X, y-b.Min.Y+got.Bounds().Min.Y).RGBA()
			if !near(gr, 0xffff-sr) || !near(gg, 0xffff-sg) || !near(gb, 0xffff-sb) {
				t.Fatalf("pixel (%d,%d) = %d,%d,%d; want inverse of %d,%d,%d", x, y, gr>>8, gg>>8, gb>>8, sr>>8, sg>>8, sb>>8)
			}
		}
	}
}

func TestDispatcherCorruptInputFails(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.addAsset(t, "acct", "broken.png", []byte("this is not an image"))
	j, err := e.svc.Submit(ctx, "acct", submitBody(t, invertGraph("broken.png")))
	if err != nil {
		t.Fatal(err)
	}
	sub := e.hub.Subscribe(j.ID)
	defer sub.Cancel()
	stop := startDispatcher(t, e, e.exec, 3)
	w := collect(t, sub)
	stop()
	if strings.Join(w.statuses, ",") != "running,failed" {
		t.Fatalf("statuses = %v", w.statuses)
	}
	done, err := e.store.GetJob(ctx, "acct", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var je struct {
		Code      string  `json:"code"`
		Message   string  `json:"message"`
		NodeID    *string `json:"node_id"`
		ClassType *string `json:"class_type"`
	}
	if err := json.Unmarshal(done.Error, &je); err != nil {
		t.Fatalf("job.error %s: %v", done.Error, err)
	}
	if done.Status != storage.JobFailed || je.Code != "node_execution_error" || je.Message == "" ||
		je.NodeID == nil || *je.NodeID != "1" || je.ClassType == nil || *je.ClassType != "LoadImage" {
		t.Fatalf("job %s error %s", done.Status, done.Error)
	}
	if len(done.Outputs) != 0 || done.Attempt != 1 {
		t.Fatalf("failed job has %d outputs after %d attempts", len(done.Outputs), done.Attempt)
	}
}

// blurChain is an EmptyImage followed by n blurs and a SaveImage: slow
// enough that a cancel arrives while it runs (about 40 ms of CPU a blur).
func blurChain(n int) map[string]node {
	g := map[string]node{
		"1": {"EmptyImage", map[string]any{"width": 512, "height": 512, "batch_size": 1, "color": 0x336699}},
	}
	prev := "1"
	for i := 0; i < n; i++ {
		id := fmt.Sprint(i + 2)
		g[id] = node{"ImageBlur", map[string]any{"image": link(prev), "blur_radius": 31, "sigma": 3.0}}
		prev = id
	}
	g[fmt.Sprint(n+2)] = node{"SaveImage", map[string]any{"images": link(prev), "filename_prefix": "blur"}}
	return g
}

func TestDispatcherCancelWhileRunning(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	j, err := e.svc.Submit(ctx, "acct", submitBody(t, blurChain(150)))
	if err != nil {
		t.Fatal(err)
	}
	sub := e.hub.Subscribe(j.ID)
	defer sub.Cancel()
	stop := startDispatcher(t, e, e.exec, 3)

	waitStatus(t, e, "acct", j.ID, storage.JobRunning)
	got, err := e.svc.Cancel(ctx, "acct", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != storage.JobCanceling {
		t.Fatalf("Cancel of a running job = %s, want canceling", got.Status)
	}
	w := collect(t, sub)
	stop()
	if strings.Join(w.statuses, ",") != "running,canceling,canceled" {
		t.Fatalf("statuses = %v", w.statuses)
	}
	checkProgressMonotonic(t, w.progress)
	done, err := e.store.GetJob(ctx, "acct", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != storage.JobCanceled || done.CompletedAt == nil || len(done.Outputs) != 0 {
		t.Fatalf("job = %s completed=%v outputs=%d", done.Status, done.CompletedAt, len(done.Outputs))
	}
}

// lostExecutor loses its worker on every attempt.
type lostExecutor struct {
	catalog func(context.Context) (workflow.Catalog, error)
	calls   atomic.Int32
}

func (l *lostExecutor) Catalog(ctx context.Context) (workflow.Catalog, error) { return l.catalog(ctx) }

func (l *lostExecutor) Execute(ctx context.Context, run *Run) error {
	l.calls.Add(1)
	return &WorkerLostError{Err: errors.New("websocket closed")}
}

func TestDispatcherWorkerLost(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	j, sub := e.submitWatchedInvert(t)
	exec := &lostExecutor{catalog: e.exec.Catalog}
	const maxAttempts = 3
	stop := startDispatcher(t, e, exec, maxAttempts)
	w := collect(t, sub)
	stop()

	// Each attempt is announced running and the last one ends failed. The
	// hand-back's "queued" is published by the attempt's goroutine after its
	// commit, while the dispatcher may already have claimed the job again
	// and announced running: status events are hints that streams answer by
	// re-reading the job, so their order across attempts is not asserted.
	running := strings.Count(strings.Join(w.statuses, ","), "running")
	if running != maxAttempts || w.statuses[0] != "running" || w.statuses[len(w.statuses)-1] != "failed" {
		t.Fatalf("statuses = %s, want %d running, the first running, the last failed", strings.Join(w.statuses, ","), maxAttempts)
	}
	if n := exec.calls.Load(); n != maxAttempts {
		t.Fatalf("executor ran %d times, want %d", n, maxAttempts)
	}
	done, err := e.store.GetJob(ctx, "acct", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var je struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(done.Error, &je)
	if done.Status != storage.JobFailed || je.Code != "worker_lost" || done.Attempt != maxAttempts {
		t.Fatalf("job = %s attempt %d error %s", done.Status, done.Attempt, done.Error)
	}
}

// progressExecutor reports the given progress values, then succeeds.
type progressExecutor struct {
	catalog func(context.Context) (workflow.Catalog, error)
	steps   []int
	// nodes are the current node of each step ("" for none), when set.
	nodes []string
}

func (p *progressExecutor) Catalog(ctx context.Context) (workflow.Catalog, error) {
	return p.catalog(ctx)
}

func (p *progressExecutor) Execute(ctx context.Context, run *Run) error {
	for i, done := range p.steps {
		pr := Progress{Value: float64(done) / 4, NodesDone: done, NodesTotal: 4}
		if i < len(p.nodes) && p.nodes[i] != "" {
			pr.CurrentNode = &p.nodes[i]
		}
		run.Progress(ctx, pr)
	}
	return nil
}

func TestDispatcherProgressStoredLatest(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	j, sub := e.submitWatchedInvert(t)
	// Repeated snapshots of one node are throttled; each new node is kept.
	exec := &progressExecutor{catalog: e.exec.Catalog, steps: []int{1, 1, 1, 2, 3, 3, 4}}
	stop := startDispatcher(t, e, exec, 3)
	w := collect(t, sub)
	stop()
	checkProgressMonotonic(t, w.progress)
	var seen []int
	for _, p := range w.progress {
		seen = append(seen, p.NodesDone)
	}
	if fmt.Sprint(seen) != "[1 2 3 4]" {
		t.Fatalf("published nodes_done %v, want [1 2 3 4]", seen)
	}
	done, _ := e.store.GetJob(ctx, "acct", j.ID)
	var p Progress
	if err := json.Unmarshal(done.Progress, &p); err != nil || p.NodesDone != 4 || p.Value != 1 {
		t.Fatalf("stored progress %s", done.Progress)
	}
}

// TestDispatcherNodesStarted: every snapshot lists the nodes of the graph
// started so far, each once, in order, and not a node the graph does not
// have (one that ComfyUI's node expansion made, "2.0.1"); a node's first
// snapshot passes the throttle even with the previous node's count, as a
// ComfyUI worker reports "2" here, and a repeat within it does not.
func TestDispatcherNodesStarted(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	j, sub := e.submitWatchedInvert(t)
	exec := &progressExecutor{catalog: e.exec.Catalog, steps: []int{1, 1, 1, 2, 3, 3, 4},
		nodes: []string{"1", "1", "2", "2.0.1", "3", "1", ""}}
	stop := startDispatcher(t, e, exec, 3)
	w := collect(t, sub)
	stop()
	var seen []string
	for _, p := range w.progress {
		node := "-"
		if p.CurrentNode != nil {
			node = *p.CurrentNode
		}
		seen = append(seen, fmt.Sprintf("%s%v", node, p.NodesStarted))
	}
	if got := strings.Join(seen, " "); got != "1[1] 2[1 2] 2.0.1[1 2] 3[1 2 3] -[1 2 3]" {
		t.Fatalf("published (current node, nodes_started): %s", got)
	}
	done, _ := e.store.GetJob(ctx, "acct", j.ID)
	var p Progress
	if err := json.Unmarshal(done.Progress, &p); err != nil || fmt.Sprint(p.NodesStarted) != "[1 2 3]" {
		t.Fatalf("stored progress %s", done.Progress)
	}
}
