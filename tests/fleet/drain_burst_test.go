package fleet

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestDrainDuringBurst (issue 29, acceptance 3): during a burst, three
// workers go away while each runs a job — one leaves DNS, one is removed
// through the admin API, one gets a SIGTERM (graceful stop) — and each
// finishes that job there; every job of the burst succeeds, and the peers
// together ran exactly one prompt per job (none lost, none run twice).
func TestDrainDuringBurst(t *testing.T) {
	var peers [5]*comfyuipeer.Peer
	for i := range peers {
		peers[i] = comfyuipeer.New(t, comfyuipeer.Options{})
	}
	d := startDNS(t)
	d.Set(peerPort(t, peers[0]), peerPort(t, peers[1]))
	g, admin := fleetGateway(t, dnsWorkers(d), "300ms")
	for _, p := range peers[2:] {
		adminCall(t, http.MethodPost, admin+"/comfygate/workers/gpu", map[string]any{"url": p.URL})
	}
	waitFor(t, "five workers healthy", func() bool {
		ws := adminWorkers(t, admin)
		for _, p := range peers {
			if !ws[p.URL].Healthy {
				return false
			}
		}
		return true
	})

	client := &http.Client{Timeout: 30 * time.Second}
	const n = 100
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := submitJob(t, client, g.URL, slowJob(8, 50, fmt.Sprint("burst ", i)))
			if err != nil {
				t.Errorf("submit: %v", err)
				return
			}
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		}()
	}
	// Each of the three leaves while it runs a prompt; the prompt is kept.
	var held [3]string
	waitFor(t, "peer 0 running", func() bool { held[0] = peers[0].Running(); return held[0] != "" })
	d.Set(peerPort(t, peers[1]))
	waitFor(t, "peer 2 running", func() bool { held[1] = peers[2].Running(); return held[1] != "" })
	adminCall(t, http.MethodDelete, admin+"/comfygate/workers/gpu?url="+url.QueryEscape(peers[2].URL), nil)
	waitFor(t, "peer 3 running", func() bool { held[2] = peers[3].Running(); return held[2] != "" })
	stopped := peers[3].Shutdown(300 * time.Millisecond)
	wg.Wait()

	jobs := waitAll(t, client, g.URL, ids, 2*time.Minute)
	<-stopped
	firstAttempt := map[string]string{}
	succeeded := 0
	for id, j := range jobs {
		firstAttempt[uuid.NewSHA1(uuid.NameSpaceURL, []byte("comfygate:"+id+":1")).String()] = id
		if j.Status == "succeeded" {
			succeeded++
		}
	}
	prompts := 0
	for _, p := range peers {
		prompts += p.Stats().Prompts
	}
	if len(ids) != n || succeeded != n || prompts != n {
		t.Errorf("%d submitted, %d succeeded, %d prompts over the peers; want %d of each", len(ids), succeeded, prompts, n)
	}
	for i, how := range []string{"DNS", "the admin API", "SIGTERM"} {
		if id := firstAttempt[held[i]]; id == "" || jobs[id].Status != "succeeded" {
			t.Errorf("the prompt running on the worker removed by %s (%s) is no first attempt of a succeeded job", how, held[i])
		}
	}
	if st := peers[3].Stats(); st.RefusedPrompts != 0 {
		t.Errorf("the stopping worker was sent %d prompts after its notice", st.RefusedPrompts)
	}
	ws := adminWorkers(t, admin)
	if _, in := ws[peers[0].URL]; in {
		t.Errorf("the worker that left DNS is still in the pool: %+v", ws[peers[0].URL])
	}
	if _, in := ws[peers[2].URL]; in {
		t.Errorf("the worker removed through the admin API is still in the pool")
	}
	if w := ws[peers[3].URL]; !w.Draining || w.DrainReason != "shutdown" {
		t.Errorf("the stopped worker: %+v, want draining for its shutdown", w)
	}
}
