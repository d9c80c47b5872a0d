package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// startFleet starts n peers and a pool over them (not yet started).
func startFleet(t *testing.T, n int) ([]*comfyuipeer.Peer, *comfyui.Pool) {
	t.Helper()
	peers := make([]*comfyuipeer.Peer, n)
	workers := make([]comfyui.WorkerConfig, n)
	for i := range peers {
		peers[i] = comfyuipeer.New(t, comfyuipeer.Options{})
		workers[i] = comfyui.WorkerConfig{URL: peers[i].URL}
	}
	pool, err := comfyui.New(comfyui.Config{Workers: workers, RequestTimeout: 10 * time.Second,
		UnhealthyAfter: 30 * time.Second, ReconnectMax: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return peers, pool
}

// allConnected: every peer has exactly one socket open and the pool sees
// every worker healthy.
func allConnected(peers []*comfyuipeer.Peer, pool *comfyui.Pool) bool {
	for _, p := range peers {
		if p.OpenSockets() != 1 {
			return false
		}
	}
	for _, w := range pool.Workers() {
		if !w.Healthy {
			return false
		}
	}
	return true
}

// maxInWindow is the largest number of socket dials the peers saw, after
// since, within any window of length w.
func maxInWindow(peers []*comfyuipeer.Peer, since time.Time, w time.Duration) (most, total int) {
	var at []time.Time
	for _, p := range peers {
		for _, a := range p.SocketAttempts() {
			if !a.Before(since) {
				at = append(at, a)
			}
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	j := 0
	for i := range at {
		for at[i].Sub(at[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most, len(at)
}

// trivialRun is an attempt of a one-node job whose outputs are dropped.
func trivialRun(t testing.TB) *jobs.Run {
	graph := `{"1":{"class_type":"SlowNode","inputs":{"steps":1,"step_ms":0}}}`
	var g workflow.Graph
	if err := json.Unmarshal([]byte(graph), &g); err != nil {
		t.Fatal(err)
	}
	return &jobs.Run{
		Job:   storage.Job{ID: uuid.NewString(), Attempt: 1, Workflow: json.RawMessage(graph)},
		Graph: g,
		OpenAsset: func(context.Context, string, string) (storage.Asset, io.ReadCloser, error) {
			return storage.Asset{}, nil, storage.ErrNotFound
		},
		Progress: func(context.Context, jobs.Progress) {},
		Preview:  func(string, string, []byte) {},
		Output:   func(context.Context, jobs.OutputFile) error { return nil },
	}
}

// TestHundredWorkers is acceptance 3 of issue 16 (connection part): one
// pool of 100 peers connects all within 10 s; after every socket is cut at
// once, all reconnect within 30 s, with no more than 20 dials reaching the
// peers in any 100 ms; then the pool runs jobs on them.
func TestHundredWorkers(t *testing.T) {
	peers, pool := startFleet(t, 100)
	start := time.Now()
	pool.Start()
	waitUntil(t, "all 100 connected", 10*time.Second, func() bool { return allConnected(peers, pool) })
	connected := time.Since(start)
	most, total := maxInWindow(peers, start, 100*time.Millisecond)
	t.Logf("start: all 100 connected in %v; %d dials, at most %d in any 100 ms", connected.Round(time.Millisecond), total, most)
	if most > 20 {
		t.Errorf("start: %d dials within 100 ms, want ≤ 20", most)
	}

	cut := time.Now()
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		go func() { defer wg.Done(); p.DropSockets() }()
	}
	wg.Wait()
	waitUntil(t, "all 100 reconnected", 30*time.Second, func() bool {
		return allConnected(peers, pool) && slices.ContainsFunc(peers, func(p *comfyuipeer.Peer) bool {
			return len(p.SocketAttempts()) > 1
		})
	})
	// Every peer saw a second dial, and all are connected again.
	for i, p := range peers {
		if n := len(p.SocketAttempts()); n < 2 {
			t.Fatalf("peer %d saw %d dials; the cut did not reach it", i, n)
		}
	}
	reconnected := time.Since(cut)
	most, total = maxInWindow(peers, cut, 100*time.Millisecond)
	t.Logf("cut: all 100 reconnected in %v; %d dials, at most %d in any 100 ms", reconnected.Round(time.Millisecond), total, most)
	if most > 20 {
		t.Errorf("after the cut: %d dials within 100 ms, want ≤ 20", most)
	}

	// The pool works: 200 jobs, 20 at a time, all succeed.
	sem := make(chan struct{}, 20)
	errs := make(chan error, 200)
	for range 200 {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- pool.Execute(context.Background(), trivialRun(t))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	prompts := 0
	for _, p := range peers {
		prompts += p.Stats().Prompts
	}
	if prompts != 200 {
		t.Fatalf("%d prompts for 200 jobs", prompts)
	}
	fmt.Printf("hundred workers: connected %v, reconnected %v\n", connected.Round(time.Millisecond), reconnected.Round(time.Millisecond))
}

func waitUntil(t *testing.T, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
