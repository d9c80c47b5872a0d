package comfyui_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/storage"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

const printGraph = `{
	"1": {"class_type": "PrintNode", "inputs": {"text": "hello from the worker ✓", "times": 3}},
	"2": {"class_type": "FailNode", "inputs": {"message": "boom"}}
}`

// TestRunLogFromWorkerLogs: an attempt that keeps a run log subscribes the
// worker session to ComfyUI's log stream and gets what the worker printed
// during its window, up to the timing line that follows the prompt's end.
func TestRunLogFromWorkerLogs(t *testing.T) {
	t.Parallel()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	pool := newPool(t, 1, peer)

	cases := []struct {
		name  string
		graph string
		want  []string
		err   func(error) bool
	}{
		{"succeeded", `{"1": {"class_type": "PrintNode", "inputs": {"text": "hello from the worker ✓", "times": 3}}}`,
			[]string{"got prompt\n", "hello from the worker ✓\nhello from the worker ✓\nhello from the worker ✓\n", "Prompt executed in "},
			func(err error) bool { return err == nil }},
		{"failed", printGraph,
			[]string{"got prompt\n", "hello from the worker ✓\n", "!!! Exception during processing !!! boom\n", "Traceback (most recent call last):", "Prompt executed in "},
			func(err error) bool { var ne *jobs.NodeError; return errors.As(err, &ne) }},
	}
	for _, c := range cases {
		run, _ := newRun(t, c.graph, nil)
		run.Job.DeploymentID = "dep-1"
		run.Log = jobs.NewRunLog(storage.MaxJobLogBytes)
		if err := pool.Execute(context.Background(), run); !c.err(err) {
			t.Fatalf("%s: Execute = %v", c.name, err)
		}
		text := run.Log.JobLog(time.Now()).Text
		last := -1
		for _, w := range c.want {
			i := strings.Index(text, w)
			if i <= last {
				t.Errorf("%s: %q missing or out of order in the run log:\n%s", c.name, w, text)
			}
			last = i
		}
		if strings.Count(text, "Prompt executed in ") != 1 || strings.Count(text, "got prompt") != 1 {
			t.Errorf("%s: the log holds another prompt's lines:\n%s", c.name, text)
		}
	}
	if st := peer.Stats(); st.LogSubscribes != 1 {
		t.Errorf("subscribed %d times, want once (the socket stayed up)", st.LogSubscribes)
	}

	// A job that keeps no run log does not stop the stream, and gets nothing.
	plain, _ := newRun(t, `{"1": {"class_type": "TextOutput", "inputs": {"text": "x"}}}`, nil)
	if err := pool.Execute(context.Background(), plain); err != nil {
		t.Fatal(err)
	}
}

// TestRunLogResubscribesAfterReconnect: ComfyUI drops a session's
// subscription with its socket; the pool subscribes again on reconnect.
func TestRunLogResubscribesAfterReconnect(t *testing.T) {
	t.Parallel()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	pool := newPool(t, 1, peer)
	first, _ := newRun(t, `{"1": {"class_type": "TextOutput", "inputs": {"text": "x"}}}`, nil)
	first.Log = jobs.NewRunLog(0)
	if err := pool.Execute(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	peer.DropSockets()
	eventually(t, "a second subscription", func() bool { return peer.Stats().LogSubscribes >= 2 })
	eventually(t, "the reconnected socket", func() bool { return peer.Stats().Sockets >= 2 })
	second, _ := newRun(t, `{"1": {"class_type": "PrintNode", "inputs": {"text": "after the reconnect", "times": 1}}}`, nil)
	second.Log = jobs.NewRunLog(0)
	if err := pool.Execute(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if text := second.Log.JobLog(time.Now()).Text; !strings.Contains(text, "after the reconnect\n") {
		t.Errorf("run log after the reconnect:\n%s", text)
	}
}
