// Package provisioner is a small autoscaler for the tests: it follows a
// pool's scale signal (GET /comfygate/scale/<pool> on the admin endpoint),
// starts test ComfyUI peers with a cold start when the signal asks for more
// workers than it runs, adds them through the admin API, and when the
// signal asks for fewer removes idle ones through the admin API (they
// drain) and stops each once the gateway let it go. It counts the
// worker-seconds it used, from each peer's start to its stop, cold starts
// included, as a GPU would be billed.
package provisioner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// Config shapes a provisioner.
type Config struct {
	// Admin is the gateway's admin endpoint, http://host:port.
	Admin string
	// Pool is the comfyui pool to follow.
	Pool string
	// Peer are the options of the peers it starts (ColdStart included).
	Peer comfyuipeer.Options
	// Concurrency is each added worker's concurrency. Default 1.
	Concurrency int
	// Poll is how often the signal is read. Default 200ms.
	Poll time.Duration
}

// Provisioner runs until Stop.
type Provisioner struct {
	t    testing.TB
	cfg  Config
	http *http.Client
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	live    []*worker // added and not removed
	leaving []*worker // removed, waiting for the gateway to let go
	used    time.Duration
	max     int
	// Started and Stopped count the peers.
	started, stopped int
	all              []*comfyuipeer.Peer
}

// Peers returns every peer it started, stopped ones included.
func (p *Provisioner) Peers() []*comfyuipeer.Peer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*comfyuipeer.Peer(nil), p.all...)
}

type worker struct {
	peer    *comfyuipeer.Peer
	started time.Time
}

// Start runs a provisioner in the background.
func Start(t testing.TB, cfg Config) *Provisioner {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Poll == 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	p := &Provisioner{t: t, cfg: cfg, http: &http.Client{Timeout: 10 * time.Second},
		stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	t.Cleanup(p.Stop)
	return p
}

// Stop ends the loop (the peers it runs stay up, counted until Stop).
func (p *Provisioner) Stop() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, w := range append(p.live, p.leaving...) {
		p.used += now.Sub(w.started)
	}
	p.live, p.leaving = nil, nil
}

// Stats reports the worker-seconds used so far (running peers counted up
// to now), the peers running now and the most that ran at once.
func (p *Provisioner) Stats() (used time.Duration, running, most, started, stopped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	used = p.used
	now := time.Now()
	for _, w := range append(p.live, p.leaving...) {
		used += now.Sub(w.started)
	}
	return used, len(p.live) + len(p.leaving), p.max, p.started, p.stopped
}

func (p *Provisioner) run() {
	defer close(p.done)
	tick := time.NewTicker(p.cfg.Poll)
	defer tick.Stop()
	for {
		if err := p.step(); err != nil {
			p.t.Logf("provisioner: %v", err)
		}
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
	}
}

// step reads the signal once and acts on it.
func (p *Provisioner) step() error {
	var sig struct {
		DesiredWorkers int `json:"desiredWorkers"`
	}
	if err := p.get("/comfygate/scale/"+p.cfg.Pool, &sig); err != nil {
		return err
	}
	var listing struct {
		Workers []struct {
			URL     string `json:"url"`
			Running int    `json:"running"`
		} `json:"workers"`
	}
	if err := p.get("/comfygate/workers/"+p.cfg.Pool, &listing); err != nil {
		return err
	}
	inPool, running := map[string]bool{}, map[string]int{}
	for _, w := range listing.Workers {
		inPool[w.URL] = true
		running[w.URL] = w.Running
	}
	// Removed workers the gateway let go of stop now.
	p.mu.Lock()
	kept := p.leaving[:0]
	for _, w := range p.leaving {
		if inPool[w.peer.URL] {
			kept = append(kept, w)
			continue
		}
		w.peer.Crash()
		p.used += time.Since(w.started)
		p.stopped++
	}
	p.leaving = kept
	live := len(p.live)
	p.mu.Unlock()

	switch {
	case sig.DesiredWorkers > live:
		for range sig.DesiredWorkers - live {
			peer := comfyuipeer.New(p.t, p.cfg.Peer) // answers after its cold start
			w := &worker{peer: peer, started: time.Now()}
			if err := p.send(http.MethodPost, "/comfygate/workers/"+p.cfg.Pool,
				map[string]any{"url": peer.URL, "concurrency": p.cfg.Concurrency}); err != nil {
				peer.Crash()
				return err
			}
			p.mu.Lock()
			p.live = append(p.live, w)
			p.all = append(p.all, peer)
			p.started++
			p.max = max(p.max, len(p.live)+len(p.leaving))
			p.mu.Unlock()
		}
	case sig.DesiredWorkers < live:
		// The idle ones first; a busy one drains.
		p.mu.Lock()
		var idle, busy []*worker
		for _, w := range p.live {
			if running[w.peer.URL] == 0 {
				idle = append(idle, w)
			} else {
				busy = append(busy, w)
			}
		}
		order := append(idle, busy...)
		n := live - sig.DesiredWorkers
		gone := order[:n]
		p.live = append([]*worker(nil), order[n:]...)
		p.leaving = append(p.leaving, gone...)
		p.mu.Unlock()
		for _, w := range gone {
			if err := p.send(http.MethodDelete, "/comfygate/workers/"+p.cfg.Pool+"?url="+url.QueryEscape(w.peer.URL), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *Provisioner) get(path string, v any) error {
	resp, err := p.http.Get(p.cfg.Admin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (p *Provisioner) send(method, path string, body any) error {
	var buf bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&buf).Encode(body)
	}
	req, _ := http.NewRequest(method, p.cfg.Admin+path, &buf)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d", method, path, resp.StatusCode)
	}
	return nil
}
