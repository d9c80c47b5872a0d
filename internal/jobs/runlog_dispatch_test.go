package jobs

import (
	"context"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/storage"
)

// TestDispatcherStoresRunLogs runs jobs of a deployment on the built-in
// executor — one that succeeds, one that fails, one canceled while it runs
// — and a job of no deployment: each deployment job ends with the lines a
// ComfyUI run prints, the other with no log at all.
func TestDispatcherStoresRunLogs(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, pngBytes := testPNG(t)
	e.addAsset(t, "acct", "a.png", pngBytes)
	e.addAsset(t, "acct", "broken.png", []byte("not an image"))
	dep := *e.svc
	dep.Config.Deployment = "dep-1"
	submit := func(svc *Service, g map[string]node) storage.Job {
		j, err := svc.Submit(ctx, "acct", submitBody(t, g))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	ok := submit(&dep, invertGraph("a.png"))
	failed := submit(&dep, invertGraph("broken.png"))
	plain := submit(e.svc, invertGraph("a.png"))
	startDispatcher(t, e, e.exec, 3)
	for _, j := range []storage.Job{ok, failed, plain} {
		waitTerminal(t, e, j.ID)
	}
	slow := submit(&dep, blurChain(150))
	waitStatus(t, e, "acct", slow.ID, storage.JobRunning)
	if _, err := dep.Cancel(ctx, "acct", slow.ID); err != nil {
		t.Fatal(err)
	}
	waitTerminal(t, e, slow.ID)

	cases := []struct {
		name string
		job  storage.Job
		want []string
	}{
		{"succeeded", ok, []string{"got prompt\n", "executed node 1 (LoadImage)", "executed node 3 (SaveImage)", "Prompt executed in "}},
		{"failed", failed, []string{"got prompt\n", "!!! Exception during processing !!! ", "Failed node 1 (LoadImage)", "Prompt executed in "}},
		{"canceled", slow, []string{"got prompt\n", "Processing interrupted\n", "Prompt executed in "}},
	}
	for _, c := range cases {
		l, found, err := e.store.GetJobLog(ctx, "acct", c.job.ID)
		if err != nil || !found {
			t.Fatalf("%s: GetJobLog = found %v, %v", c.name, found, err)
		}
		last := -1
		for _, w := range c.want {
			i := strings.Index(l.Text, w)
			if i <= last {
				t.Errorf("%s: %q missing or out of order in:\n%s", c.name, w, l.Text)
			}
			last = i
		}
		if l.Truncated || l.CapturedAt.IsZero() {
			t.Errorf("%s: truncated %v captured %v", c.name, l.Truncated, l.CapturedAt)
		}
	}
	if _, found, err := e.store.GetJobLog(ctx, "acct", plain.ID); err != nil || found {
		t.Errorf("a job of no deployment has a run log: found %v, %v", found, err)
	}
}

func waitTerminal(t *testing.T, e *env, id string) {
	t.Helper()
	waitStatus(t, e, "acct", id, storage.JobSucceeded, storage.JobFailed, storage.JobCanceled, storage.JobExpired)
}
