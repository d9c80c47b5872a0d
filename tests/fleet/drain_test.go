package fleet

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// startPair starts a gateway whose pool gpu has the two peers as config
// workers, and waits for both to be healthy.
func startPair(t *testing.T, a, b *comfyuipeer.Peer) (*gateway.Gateway, string) {
	t.Helper()
	g, admin := fleetGateway(t, "worker "+a.URL+"\n\t\t\tworker "+b.URL, "300ms")
	waitFor(t, "both workers healthy", func() bool {
		ws := adminWorkers(t, admin)
		return ws[a.URL].Healthy && ws[b.URL].Healthy
	})
	return g, admin
}

func slowJob(steps, stepMS int, text string) map[string]any {
	return map[string]any{
		"1": gateway.Node("SlowNode", map[string]any{"steps": steps, "step_ms": stepMS}),
		"2": gateway.Node("TextOutput", map[string]any{"text": text}),
	}
}

// runningPeer waits for one of the peers to run a prompt and returns it
// and the other.
func runningPeer(t *testing.T, a, b *comfyuipeer.Peer) (busy, other *comfyuipeer.Peer, prompt string) {
	t.Helper()
	waitFor(t, "a peer running the job", func() bool { return a.Running() != "" || b.Running() != "" })
	if id := a.Running(); id != "" {
		return a, b, id
	}
	return b, a, b.Running()
}

// TestDrainOnShutdownNotice: a worker whose ComfyUI announces its
// shutdown (its sockets closed with 1001 going away, or 1012 service
// restart) while it runs a job finishes that job and gets no new one; the
// admin API shows it draining for that reason meanwhile.
func TestDrainOnShutdownNotice(t *testing.T) {
	for _, code := range []websocket.StatusCode{websocket.StatusGoingAway, websocket.StatusServiceRestart} {
		t.Run(code.String(), func(t *testing.T) { drainOnNotice(t, code) })
	}
}

func drainOnNotice(t *testing.T, code websocket.StatusCode) {
	a, b := comfyuipeer.New(t, comfyuipeer.Options{}), comfyuipeer.New(t, comfyuipeer.Options{})
	g, admin := startPair(t, a, b)
	client := &http.Client{Timeout: 30 * time.Second}
	first, err := submitJob(t, client, g.URL, slowJob(20, 100, "long"))
	if err != nil {
		t.Fatal(err)
	}
	busy, other, prompt := runningPeer(t, a, b)
	if prompt != uuid.NewSHA1(uuid.NameSpaceURL, []byte("comfygate:"+first+":1")).String() {
		t.Fatalf("the running prompt %s is not the first attempt of job %s", prompt, first)
	}
	stopped := busy.ShutdownWith(code, 300*time.Millisecond)
	waitFor(t, "the stopping worker draining", func() bool {
		w := adminWorkers(t, admin)[busy.URL]
		return w.Draining && w.DrainReason == "shutdown"
	})
	ids := []string{first}
	for i := range 6 {
		id, err := submitJob(t, client, g.URL, slowJob(3, 50, fmt.Sprint("short ", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	jobs := waitAll(t, client, g.URL, ids, time.Minute)
	for id, j := range jobs {
		if j.Status != "succeeded" {
			t.Errorf("job %s: %s", id, j.Status)
		}
	}
	<-stopped
	if st := busy.Stats(); st.Prompts != 1 || st.RefusedPrompts != 0 {
		t.Errorf("the stopping worker got %d prompts and refused %d; want its one job and nothing after the notice", st.Prompts, st.RefusedPrompts)
	}
	if st := other.Stats(); st.Prompts != 6 {
		t.Errorf("the other worker ran %d prompts, want the 6 later jobs", st.Prompts)
	}
}

// TestShutdownMidJob: a worker that stops at once (1001, then its port
// refuses) loses the job it ran; the job is handed to the other worker and
// succeeds there, and the stopped worker is out of rotation at once.
func TestShutdownMidJob(t *testing.T) {
	a, b := comfyuipeer.New(t, comfyuipeer.Options{}), comfyuipeer.New(t, comfyuipeer.Options{})
	g, admin := startPair(t, a, b)
	client := &http.Client{Timeout: 30 * time.Second}
	id, err := submitJob(t, client, g.URL, slowJob(20, 100, "long"))
	if err != nil {
		t.Fatal(err)
	}
	busy, other, _ := runningPeer(t, a, b)
	busy.Terminate()
	waitFor(t, "the stopped worker draining", func() bool {
		w := adminWorkers(t, admin)[busy.URL]
		return w.Draining && w.DrainReason == "shutdown"
	})
	jobs := waitAll(t, client, g.URL, []string{id}, time.Minute)
	if jobs[id].Status != "succeeded" {
		t.Fatalf("job %s: %s", id, jobs[id].Status)
	}
	if a, b := busy.Stats().Prompts, other.Stats().Prompts; a != 1 || b != 1 {
		t.Errorf("prompts: %d on the stopped worker, %d on the other; want one each (the job handed on once)", a, b)
	}
}

// TestColdWorkerClaimsNothing (issue 29): a pool at zero gets a worker
// whose cold start is longer than unhealthy_after; the job submitted
// meanwhile stays queued until the worker answers, then runs on its first
// attempt (it is not claimed for the booting worker and lost when the
// wait for a healthy one runs out).
func TestColdWorkerClaimsNothing(t *testing.T) {
	warm := comfyuipeer.New(t, comfyuipeer.Options{})
	adminAddr := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
	admin := "http://" + adminAddr
	g := gateway.Start(t, gateway.V2Config(`storage embedded ./data
		jobs {
			max_attempts 1
		}
		pool gpu comfyui {
			unhealthy_after 1s
			reconnect_max 200ms
		}`, gateway.V2Site{Pool: "gpu", Admin: adminAddr}), gateway.Options{})
	// A first worker gives the pool its catalog, then leaves: at zero.
	adminCall(t, http.MethodPost, admin+"/comfygate/workers/gpu", map[string]any{"url": warm.URL})
	waitFor(t, "the first worker healthy", func() bool { return adminWorkers(t, admin)[warm.URL].Healthy })
	client := &http.Client{Timeout: 30 * time.Second}
	first, err := submitJob(t, client, g.URL, slowJob(1, 0, "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	// Run there before the worker leaves (else the cold worker runs it too).
	waitAll(t, client, g.URL, []string{first}, time.Minute)
	adminCall(t, http.MethodDelete, admin+"/comfygate/workers/gpu?url="+url.QueryEscape(warm.URL), nil)
	waitFor(t, "the pool at zero", func() bool { return len(adminWorkers(t, admin)) == 0 })

	cold := comfyuipeer.New(t, comfyuipeer.Options{ColdStart: 3 * time.Second})
	adminCall(t, http.MethodPost, admin+"/comfygate/workers/gpu", map[string]any{"url": cold.URL})
	id, err := submitJob(t, client, g.URL, slowJob(2, 50, "after the cold start"))
	if err != nil {
		t.Fatal(err)
	}
	if j := waitAll(t, client, g.URL, []string{id}, time.Minute)[id]; j.Status != "succeeded" {
		t.Fatalf("the job submitted during the cold start: %s", j.Status)
	}
	if n := cold.Stats().Prompts; n != 1 {
		t.Errorf("the cold worker ran %d prompts, want 1", n)
	}
}
