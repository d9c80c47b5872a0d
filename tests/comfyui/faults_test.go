package comfyui

import (
	"net/http"
	"testing"
	"time"

	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestFaults covers acceptance 2: each fault ends in the right state with
// no duplicate outputs.
func TestFaults(t *testing.T) {
	t.Run("crash mid-job is redispatched to the other worker", func(t *testing.T) {
		s := startStack(t)
		id := submitOK(t, s.g, slowText(60, 50, "survived"))
		var victim *comfyuipeer.Peer
		until(t, "the job running on a peer", func() bool { victim = s.running(); return victim != nil })
		victim.Crash()
		j := gateway.WaitJob(t, s.g.URL, id, 2*time.Minute, gateway.Terminal)
		if j["status"] != "succeeded" {
			t.Fatalf("job ended %v: %v", j["status"], j["error"])
		}
		checkOneText(t, s, j, "survived")
	})

	t.Run("both workers dead fails with worker_lost", func(t *testing.T) {
		s := startStack(t)
		id := submitOK(t, s.g, slowText(60, 50, "never"))
		var first *comfyuipeer.Peer
		until(t, "the job running on a peer", func() bool { first = s.running(); return first != nil })
		// The worker running it dies; the job goes to the other one, which
		// dies too. (Both dying at once would leave the job queued until a
		// worker is healthy again: jobs are claimed for healthy workers only.)
		first.Crash()
		until(t, "the job running on the other peer", func() bool { p := s.running(); return p != nil && p != first })
		for _, p := range s.peers {
			if p != first {
				p.Crash()
			}
		}
		// Two attempts, each bounded by the pool's unhealthy_after (3s here),
		// plus the lease.
		j := gateway.WaitJob(t, s.g.URL, id, 90*time.Second, gateway.Terminal)
		e, _ := j["error"].(map[string]any)
		if j["status"] != "failed" || e["code"] != "worker_lost" {
			t.Fatalf("job %v error %v, want failed worker_lost", j["status"], e)
		}
	})

	t.Run("dropped socket is reconciled without losing outputs", func(t *testing.T) {
		s := startStack(t)
		id := submitOK(t, s.g, slowText(30, 50, "kept"))
		var p *comfyuipeer.Peer
		until(t, "the job running on a peer", func() bool { p = s.running(); return p != nil })
		p.Set(func(sw *comfyuipeer.Switches) { sw.RejectSockets = true })
		p.DropSockets()
		until(t, "the prompt finished while disconnected", func() bool { return len(p.HistoryIDs()) == 1 })
		p.Set(func(sw *comfyuipeer.Switches) { sw.RejectSockets = false })
		j := gateway.WaitJob(t, s.g.URL, id, time.Minute, gateway.Terminal)
		if j["status"] != "succeeded" {
			t.Fatalf("job ended %v: %v", j["status"], j["error"])
		}
		checkOneText(t, s, j, "kept")
	})

	t.Run("history written late and restart losing history", func(t *testing.T) {
		s := startStack(t)
		for _, p := range s.peers {
			p.Set(func(sw *comfyuipeer.Switches) { sw.HistoryDelay = time.Second })
		}
		id := submitOK(t, s.g, slowText(5, 10, "late"))
		j := gateway.WaitJob(t, s.g.URL, id, time.Minute, gateway.Terminal)
		if j["status"] != "succeeded" {
			t.Fatalf("late history: job ended %v: %v", j["status"], j["error"])
		}
		checkOneText(t, s, j, "late")

		id = submitOK(t, s.g, slowText(40, 50, "restarted"))
		var p *comfyuipeer.Peer
		until(t, "the job running on a peer", func() bool { p = s.running(); return p != nil })
		p.Restart()
		j = gateway.WaitJob(t, s.g.URL, id, 2*time.Minute, gateway.Terminal)
		if j["status"] != "succeeded" {
			t.Fatalf("restart: job ended %v: %v", j["status"], j["error"])
		}
		checkOneText(t, s, j, "restarted")
	})
}

func checkOneText(t *testing.T, s *stack, j map[string]any, want string) {
	t.Helper()
	outs := j["outputs"].([]any)
	if len(outs) != 1 {
		t.Fatalf("outputs %v, want exactly one", outs)
	}
	o := outs[0].(map[string]any)
	body := gateway.Do(t, http.MethodGet, s.g.URL+"/api/v2/assets/"+o["id"].(string)+"/content", nil, nil).Body
	if string(body) != want {
		t.Errorf("output %q, want %q", body, want)
	}
}
