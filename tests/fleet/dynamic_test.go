package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
	"github.com/comfygate/comfygate/tests/peers/dnssrv"
)

// startDNS serves _comfyui._tcp.fleet.test until the test ends.
func startDNS(t *testing.T) *dnssrv.Server { return dnssrv.Start(t, "fleet.test") }

func peerPort(t *testing.T, p *comfyuipeer.Peer) int {
	t.Helper()
	u, _ := url.Parse(p.URL)
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func adminWorkers(t *testing.T, admin string) map[string]comfyui.WorkerState {
	t.Helper()
	return gateway.AdminWorkers(t, admin, "gpu")
}

func adminCall(t *testing.T, method, u string, body any) {
	t.Helper()
	var buf bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&buf).Encode(body)
	}
	req, _ := http.NewRequest(method, u, &buf)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d", method, u, resp.StatusCode)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fleetGateway starts a gateway whose pool gpu is a ComfyUI pool of
// workers (config worker lines or a DNS block), with a 5 s lease, three
// attempts, unhealthy_after 3s and reconnect_max, and returns it with its
// admin API's base URL.
func fleetGateway(t *testing.T, workers, reconnectMax string) (*gateway.Gateway, string) {
	t.Helper()
	adminAddr := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
	g := gateway.Start(t, gateway.V2Config(`storage embedded ./data
		jobs {
			lease 5s
			max_attempts 3
		}
		pool gpu comfyui {
			`+workers+`
			unhealthy_after 3s
			reconnect_max `+reconnectMax+`
		}`, gateway.V2Site{Pool: "gpu", Admin: adminAddr}), gateway.Options{})
	return g, "http://" + adminAddr
}

// dnsWorkers is the workers block of a pool that follows d's SRV record.
func dnsWorkers(d *dnssrv.Server) string {
	return "workers dns " + d.Name + " {\n\t\t\t\tresolver " + d.Addr + "\n\t\t\t\trefresh 200ms\n\t\t\t}"
}

// TestDynamicWorkers adds and removes workers through DNS (a local DNS
// server) and the admin API while jobs run: every job succeeds, each ran
// exactly once (one prompt per job over all peers), a removed worker
// finishes the job it was running and gets none after it left.
func TestDynamicWorkers(t *testing.T) {
	var peers [4]*comfyuipeer.Peer
	for i := range peers {
		peers[i] = comfyuipeer.New(t, comfyuipeer.Options{})
	}
	d := startDNS(t)
	d.Set(peerPort(t, peers[0]), peerPort(t, peers[1]))
	g, admin := fleetGateway(t, dnsWorkers(d), "1s")
	waitFor(t, "the two DNS workers healthy", func() bool {
		ws := adminWorkers(t, admin)
		return ws[peers[0].URL].Healthy && ws[peers[1].URL].Healthy && len(ws) == 2 &&
			ws[peers[0].URL].Source == "dns:_comfyui._tcp.fleet.test"
	})

	client := &http.Client{Timeout: 30 * time.Second}
	const n = 60
	ids := make([]string, 0, n)
	submitted := make(chan struct{})
	var subErr error
	go func() {
		defer close(submitted)
		for i := range n {
			id, err := submitJob(t, client, g.URL, map[string]any{
				"1": gateway.Node("SlowNode", map[string]any{"steps": 5, "step_ms": 60}),
				"2": gateway.Node("TextOutput", map[string]any{"text": fmt.Sprint("job ", i)}),
			})
			if err != nil {
				subErr = err
				return
			}
			ids = append(ids, id)
			time.Sleep(60 * time.Millisecond)
		}
	}()

	// The admin API adds peer 2; it takes jobs.
	adminCall(t, http.MethodPost, admin+"/comfygate/workers/gpu", map[string]any{"url": peers[2].URL})
	waitFor(t, "the added worker running a job", func() bool { return peers[2].Running() != "" })
	// DNS swaps peer 0 for peer 3 while peer 0 runs a job: peer 0 drains.
	waitFor(t, "peer 0 running a job", func() bool { return peers[0].Running() != "" })
	d.Set(peerPort(t, peers[1]), peerPort(t, peers[3]))
	// The admin API removes peer 2 while it runs a job: it drains.
	waitFor(t, "peer 2 running a job", func() bool { return peers[2].Running() != "" })
	running2 := peers[2].Running()
	adminCall(t, http.MethodDelete, admin+"/comfygate/workers/gpu?url="+url.QueryEscape(peers[2].URL), nil)

	left := map[int]int{} // peer → prompts when it left the pool
	waitFor(t, "peers 0 and 2 drained and gone", func() bool {
		ws := adminWorkers(t, admin)
		for _, i := range []int{0, 2} {
			if _, in := ws[peers[i].URL]; !in {
				if _, seen := left[i]; !seen {
					left[i] = peers[i].Stats().Prompts
				}
			}
		}
		return len(left) == 2
	})
	waitFor(t, "peer 3 in the pool", func() bool { return adminWorkers(t, admin)[peers[3].URL].Healthy })

	<-submitted
	if subErr != nil {
		t.Fatal(subErr)
	}
	jobs := waitAll(t, client, g.URL, ids, 2*time.Minute)
	for id, j := range jobs {
		if j.Status != "succeeded" {
			t.Errorf("job %s %s", id, j.Status)
		}
	}
	total := 0
	for i, p := range peers {
		st := p.Stats()
		total += st.Prompts
		t.Logf("peer %d: %d prompts, %d interrupts", i, st.Prompts, st.Interrupts)
		if st.Interrupts != 0 {
			t.Errorf("peer %d had %d prompts interrupted", i, st.Interrupts)
		}
		if st.Prompts == 0 {
			t.Errorf("peer %d ran no job; the test did not exercise it", i)
		}
	}
	if total != n {
		t.Errorf("%d prompts over the peers for %d jobs: some job ran twice or never", total, n)
	}
	for i, at := range left {
		if got := peers[i].Stats().Prompts; got != at {
			t.Errorf("peer %d got %d prompts after it left the pool", i, got-at)
		}
	}
	// The prompt peer 2 ran when it was removed is attempt 1 of a job (the
	// gateway derives a prompt id from the job id and attempt), and that
	// job succeeded: the drain let it finish.
	var drained string
	for _, id := range ids {
		if uuid.NewSHA1(uuid.NameSpaceURL, []byte("comfygate:"+id+":1")).String() == running2 {
			drained = id
		}
	}
	if drained == "" || jobs[drained].Status != "succeeded" {
		t.Errorf("the prompt peer 2 ran when it was removed (%s) is no first attempt of a succeeded job (job %q)", running2, drained)
	}
}

// TestDNSOnlyPoolCatalog: a pool whose workers all come from DNS answers
// its first Catalog call with the catalog of the workers the first lookup
// found, not with "no worker reachable yet".
func TestDNSOnlyPoolCatalog(t *testing.T) {
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	d := startDNS(t)
	d.Set(peerPort(t, peer))
	pool, err := comfyui.New(comfyui.Config{DNS: []comfyui.DNSConfig{{Name: "_comfyui._tcp.fleet.test",
		Resolver: d.Addr, Refresh: time.Minute}}, RequestTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cat, err := pool.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cat["SlowNode"]; !ok {
		t.Fatalf("the catalog lacks the peer's classes (%d classes)", len(cat))
	}
}
