package comfyui_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/internal/jobs"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// Graphs that stage asset in1 and end each way an attempt can end.
const (
	stagedSuccessGraph = `{
		"1": {"class_type": "LoadImage", "inputs": {"image": {"__type": "core/ASSET", "info": {"id": "in1"}}}},
		"2": {"class_type": "SaveImage", "inputs": {"filename_prefix": "copy", "images": ["1", 0]}}
	}`
	stagedFailGraph = `{
		"1": {"class_type": "LoadImage", "inputs": {"image": {"__type": "core/ASSET", "info": {"id": "in1"}}}},
		"2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}},
		"3": {"class_type": "FailNode", "inputs": {"message": "out of cheese"}}
	}`
	stagedSlowGraph = `{
		"1": {"class_type": "LoadImage", "inputs": {"image": {"__type": "core/ASSET", "info": {"id": "in1"}}}},
		"2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}},
		"3": {"class_type": "SlowNode", "inputs": {"steps": 400, "step_ms": 50}}
	}`
)

// plantFile writes a file under dir (creating its folders) and returns its
// path.
func plantFile(t *testing.T, dir, rel string) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Lstat(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// TestStagedInputsRemoved runs attempts that stage an input on a worker
// whose input directory the pool was given, and checks that the job's
// subfolder is gone when Execute returns, whatever the outcome, while other
// jobs' inputs and the operator's own files stay; without input_dir the
// inputs stay, as before.
func TestStagedInputsRemoved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		graph    string
		switches func(*comfyuipeer.Switches)
		// cancel cancels the attempt once its prompt runs.
		cancel  bool
		noDir   bool // the pool is not given the input directory
		wantErr func(error) bool
	}{
		{name: "success", graph: stagedSuccessGraph, wantErr: func(err error) bool { return err == nil }},
		{name: "execution_error", graph: stagedFailGraph, wantErr: func(err error) bool {
			var ne *jobs.NodeError
			return errors.As(err, &ne) && ne.Code == "node_execution_error"
		}},
		{name: "refused graph", graph: stagedSuccessGraph, switches: func(s *comfyuipeer.Switches) { s.NodeErrors400 = true },
			wantErr: func(err error) bool {
				var ne *jobs.NodeError
				return errors.As(err, &ne) && ne.Code == "invalid_workflow"
			}},
		{name: "cancel while running", graph: stagedSlowGraph, cancel: true,
			wantErr: func(err error) bool { return errors.Is(err, context.Canceled) }},
		{name: "without input_dir the inputs stay", graph: stagedSuccessGraph, noDir: true,
			wantErr: func(err error) bool { return err == nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			peer := comfyuipeer.New(t, comfyuipeer.Options{InputDir: dir})
			if tc.switches != nil {
				peer.Set(tc.switches)
			}
			wc := comfyui.WorkerConfig{URL: peer.URL, Concurrency: 1, InputDir: dir}
			if tc.noDir {
				wc.InputDir = ""
			}
			pool := startPool(t, wc)
			otherJob := plantFile(t, dir, "comfygate/"+uuid.NewString()+"/other.png")
			ownFile := plantFile(t, dir, "operator.png")

			run, _ := newRun(t, tc.graph, map[string][]byte{"in1": gradientPNG(t, 4, 4)})
			jobDir := filepath.Join(dir, "comfygate", run.Job.ID)
			staged := filepath.Join(jobDir, "in1.png")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := runAsync(ctx, pool, run)
			if tc.cancel {
				eventually(t, "the prompt running", func() bool { return peer.Running() != "" })
				if !exists(t, staged) {
					t.Fatalf("%s not staged on disk while the prompt runs", staged)
				}
				cancel()
			}
			if err := wait(t, done); !tc.wantErr(err) {
				t.Fatalf("Execute = %v", err)
			}
			if n := peer.Stats().Uploads; n != 1 {
				t.Fatalf("%d uploads, want 1", n)
			}
			if got, want := exists(t, jobDir), tc.noDir; got != want {
				t.Errorf("job folder exists = %v after Execute returned, want %v (inputs %v)", got, want, peer.Inputs())
			}
			if tc.noDir && !exists(t, staged) {
				t.Errorf("without input_dir the staged input %s is gone", staged)
			}
			for _, keep := range []string{otherJob, ownFile} {
				if !exists(t, keep) {
					t.Errorf("%s was removed", keep)
				}
			}
		})
	}
}

// TestStagedInputsOfConcurrentJobs runs two jobs at once on two workers that
// share one input directory: the quick job's cleanup must not take the
// slow job's input, which the slow job loads only after the quick one ended.
func TestStagedInputsOfConcurrentJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	peers := []*comfyuipeer.Peer{comfyuipeer.New(t, comfyuipeer.Options{InputDir: dir}), comfyuipeer.New(t, comfyuipeer.Options{InputDir: dir})}
	pool := startPool(t,
		comfyui.WorkerConfig{URL: peers[0].URL, Concurrency: 1, InputDir: dir},
		comfyui.WorkerConfig{URL: peers[1].URL, Concurrency: 1, InputDir: dir})
	src := gradientPNG(t, 6, 6)
	slow, slowRec := newRun(t, `{
		"1": {"class_type": "LoadImage", "inputs": {"image": {"__type": "core/ASSET", "info": {"id": "in1"}}}},
		"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
		"3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0]}},
		"4": {"class_type": "SlowNode", "inputs": {"steps": 20, "step_ms": 50}}
	}`, map[string][]byte{"in1": src})
	slowDone := runAsync(context.Background(), pool, slow)
	eventually(t, "the slow job running", func() bool { return peers[0].Running() != "" || peers[1].Running() != "" })

	quick, _ := newRun(t, stagedSuccessGraph, map[string][]byte{"in1": gradientPNG(t, 4, 4)})
	if err := pool.Execute(context.Background(), quick); err != nil {
		t.Fatalf("quick job: %v", err)
	}
	if exists(t, filepath.Join(dir, "comfygate", quick.Job.ID)) {
		t.Error("the quick job's inputs stayed")
	}
	if !exists(t, filepath.Join(dir, "comfygate", slow.Job.ID, "in1.png")) {
		t.Fatal("the quick job's cleanup removed the slow job's input")
	}
	if err := wait(t, slowDone); err != nil {
		t.Fatalf("slow job: %v", err)
	}
	_, _, outs := slowRec.snapshot()
	if len(outs) != 1 {
		t.Fatalf("slow job outputs %d, want 1", len(outs))
	}
	checkInverted(t, src, outs[0].data)
	if exists(t, filepath.Join(dir, "comfygate", slow.Job.ID)) {
		t.Error("the slow job's inputs stayed")
	}
}

// TestStagedInputsPathEscape gives an attempt a job id that, joined to the
// input directory, would name a folder outside it: the pool must refuse to
// remove anything there.
func TestStagedInputsPathEscape(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "input")
	victims := []string{plantFile(t, base, "victim/precious.txt"), plantFile(t, dir, "operator.png")}
	peer := comfyuipeer.New(t, comfyuipeer.Options{InputDir: dir})
	pool := startPool(t, comfyui.WorkerConfig{URL: peer.URL, Concurrency: 1, InputDir: dir})
	// Joined naively, the first names <base>/victim, the second the input
	// directory itself.
	for _, id := range []string{"../../victim", ".."} {
		// No asset: nothing is staged, the prompt runs, the cleanup sees the id.
		run, _ := newRun(t, `{"1": {"class_type": "TextOutput", "inputs": {"text": "x"}}}`, nil)
		run.Job.ID = id
		if err := pool.Execute(context.Background(), run); err != nil {
			t.Fatalf("Execute with job id %q: %v", id, err)
		}
		for _, v := range victims {
			if !exists(t, v) {
				t.Fatalf("job id %q removed %s", id, v)
			}
		}
	}
}
