package comfyui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/comfyui"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestPromptIDOfTheAnswer (issue 39): the attempt follows the prompt id
// that POST /prompt answers. A ComfyUI that honours the client's
// prompt_id answers that one; one older than upstream 260a5ca5 answers its
// own, and its first events (or all of them) may come before the answer,
// or the answer may be lost (the prompt is found by its attempt marker).
// Each way the prompt runs once, its outputs are committed once and its
// history entry is deleted (found under the right id).
func TestPromptIDOfTheAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sw   func(*comfyuipeer.Switches)
		// lostAnswer: the messages before the prompt is found are lost.
		lostAnswer bool
	}{
		{"client id honoured", func(*comfyuipeer.Switches) {}, false},
		{"own ids", func(s *comfyuipeer.Switches) { s.OwnPromptIDs = true }, false},
		{"own ids, events before the answer", func(s *comfyuipeer.Switches) {
			s.OwnPromptIDs = true
			s.AnswerDelay = 300 * time.Millisecond
		}, false},
		{"own ids, answer lost", func(s *comfyuipeer.Switches) {
			s.OwnPromptIDs = true
			s.DropAnswers = true
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			peer := comfyuipeer.New(t, comfyuipeer.Options{})
			peer.Set(tc.sw)
			pool := newPool(t, 1, peer)
			run, rec := newRun(t, `{
				"1": {"class_type": "SlowNode", "inputs": {"steps": 3, "step_ms": 20}},
				"2": {"class_type": "TextOutput", "inputs": {"text": "once"}}
			}`, nil)
			if err := pool.Execute(context.Background(), run); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			progress, _, outs := rec.snapshot()
			if len(outs) != 1 || string(outs[0].data) != "once" {
				t.Errorf("outputs %v, want the text once", outs)
			}
			if len(progress) == 0 || progress[len(progress)-1].NodesDone != 2 {
				t.Errorf("progress %+v, want it to end at 2/2 nodes", progress)
			}
			steps := false // only the socket's progress messages carry them
			for _, p := range progress {
				steps = steps || p.Steps != nil && *p.Steps == 3
			}
			if !steps && !tc.lostAnswer {
				t.Errorf("progress %+v: none carried the SlowNode's steps (its messages were lost)", progress)
			}
			if n := peer.Stats().Prompts; n != 1 {
				t.Errorf("%d prompts on the worker, want 1", n)
			}
			eventually(t, "the prompt's history deleted", func() bool {
				return len(peer.HistoryIDs()) == 0 && peer.Stats().HistoryDeletes == 1
			})
			if w := pool.Workers()[0]; !w.Healthy {
				t.Errorf("worker %+v, want healthy", w)
			}
		})
	}
}

// TestRefusedPromptIsHandedOn: a POST /prompt answered 503 (a worker
// that shuts down, or a proxy in front of one that is away) queued
// nothing; the attempt is handed on (WorkerLostError), not failed, and
// the next attempt runs once the worker takes prompts again.
func TestRefusedPromptIsHandedOn(t *testing.T) {
	t.Parallel()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	peer.Set(func(s *comfyuipeer.Switches) { s.RefusePrompts = true })
	pool := newPool(t, 1, peer)
	run, _ := newRun(t, slowGraph, nil)
	if err := pool.Execute(context.Background(), run); !isWorkerLost(err) {
		t.Fatalf("Execute on a worker answering 503 = %v, want WorkerLostError", err)
	}
	if n := peer.Stats().Prompts; n != 0 {
		t.Errorf("%d prompts queued on the refusing worker, want 0", n)
	}
	peer.Set(func(s *comfyuipeer.Switches) { s.RefusePrompts = false })
	run, _ = newRun(t, slowGraph, nil)
	run.Job.Attempt = 2
	if err := pool.Execute(context.Background(), run); err != nil {
		t.Fatalf("the next attempt: %v", err)
	}
}

// TestUnmatchedAnswersBreakTheWorker (issue 39): a worker whose answers
// name prompts it does not have (its /queue, /history and socket never
// mention them) is marked unhealthy with the reason, and stays so while it
// answers; the attempt is handed on, and the worker gets no other prompt
// until the operator adds it again.
func TestUnmatchedAnswersBreakTheWorker(t *testing.T) {
	t.Parallel()
	bad := comfyuipeer.New(t, comfyuipeer.Options{})
	bad.Set(func(s *comfyuipeer.Switches) { s.UnmatchedAnswers = true })
	pool := newPool(t, 1, bad)
	run, _ := newRun(t, slowGraph, nil)
	if err := pool.Execute(context.Background(), run); !isWorkerLost(err) {
		t.Fatalf("Execute = %v, want WorkerLostError", err)
	}
	w := pool.Workers()[0]
	if w.Healthy || !strings.Contains(w.UnhealthyReason, "match") {
		t.Fatalf("worker %+v, want unhealthy with the reason", w)
	}
	good := comfyuipeer.New(t, comfyuipeer.Options{})
	if err := pool.AddWorker(comfyui.WorkerConfig{URL: good.URL}); err != nil {
		t.Fatal(err)
	}
	for attempt := 2; attempt <= 3; attempt++ {
		run, _ := newRun(t, slowGraph, nil)
		run.Job.Attempt = attempt
		if err := pool.Execute(context.Background(), run); err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
	}
	if n := bad.Stats().Prompts; n != 1 {
		t.Errorf("the broken worker got %d prompts, want the first one only", n)
	}
	if w := pool.Workers()[0]; w.Healthy {
		t.Errorf("the broken worker is healthy again while its answers still do not match: %+v", w)
	}
	// Fixed, and added again by the operator: tried again.
	bad.Set(func(s *comfyuipeer.Switches) { s.UnmatchedAnswers = false })
	if err := pool.AddWorker(comfyui.WorkerConfig{URL: bad.URL}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the fixed worker healthy", func() bool { return pool.Workers()[0].Healthy })
}

// TestWorkerKilledIsUnhealthyAtOnce (issue 37): a worker whose socket ends
// without a shutdown notice and whose port then refuses (SIGKILL) is
// unhealthy at once, long before unhealthy_after (an hour here), and the
// attempt it ran is handed on; one that announced its shutdown (1001, its
// queue finished) drains: it stays healthy and finishes its prompt.
func TestWorkerKilledIsUnhealthyAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		stop    func(p *comfyuipeer.Peer)
		wantErr func(error) bool
		healthy bool
		drain   string
	}{
		{"killed", (*comfyuipeer.Peer).Crash, isWorkerLost, false, ""},
		{"graceful shutdown", func(p *comfyuipeer.Peer) { p.Shutdown(time.Hour) },
			func(err error) bool { return err == nil }, true, "shutdown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			peer := comfyuipeer.New(t, comfyuipeer.Options{})
			pool := startPoolWith(t, comfyui.Config{
				Workers:        []comfyui.WorkerConfig{{URL: peer.URL}},
				ReconnectMax:   100 * time.Millisecond,
				RequestTimeout: 5 * time.Second,
				UnhealthyAfter: time.Hour,
			})
			run, _ := newRun(t, slowGraph, nil)
			done := runAsync(context.Background(), pool, run)
			eventually(t, "the prompt running", func() bool { return peer.Running() != "" })
			tc.stop(peer)
			if err := wait(t, done); !tc.wantErr(err) {
				t.Fatalf("Execute = %v", err)
			}
			w := pool.Workers()[0]
			if w.Healthy != tc.healthy || w.DrainReason != tc.drain {
				t.Fatalf("worker %+v, want healthy %v, drain reason %q", w, tc.healthy, tc.drain)
			}
			if !tc.healthy && w.UnhealthyReason == "" {
				t.Errorf("worker %+v: unhealthy without a reason", w)
			}
		})
	}
}
