package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/comfygate/comfygate/tests/browser"
	"github.com/comfygate/comfygate/tests/gateway"
)

// followScript opens an EventSource on the job's stream (same origin as
// the page) and records what arrives in window.followed; it closes the
// source after the terminal status, as a page must (an EventSource
// reconnects when the server ends the stream). Every error event counts:
// a live stream that breaks makes the browser reconnect in a loop.
const followScript = `(() => {
	const f = window.followed = {events: [], errors: 0, done: false};
	const es = new EventSource(%q);
	for (const name of ["status", "progress", "output", "preview"]) {
		es.addEventListener(name, (e) => {
			const data = JSON.parse(e.data);
			f.events.push({name, status: data.status || "", at: Date.now()});
			if (name === "status" && ["succeeded", "failed", "canceled", "expired"].includes(data.status)) {
				f.done = true;
				es.close();
			}
		});
	}
	es.onerror = () => { f.errors++; };
	return true;
})()`

type followed struct {
	Events []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		At     int64  `json:"at"`
	} `json:"events"`
	Errors int  `json:"errors"`
	Done   bool `json:"done"`
}

// TestBrowserEventSource: headless Chromium's EventSource, over HTTPS
// (HTTP/2 or HTTP/3, whichever the browser picks), follows a job whose
// node is quiet for 12 s: it gets the live frames and the terminal status
// with no error and no reconnect.
func TestBrowserEventSource(t *testing.T) {
	t.Parallel()
	s := startSite(t, "")
	ctl := s.client(t, h2, clientOptions{})
	job := s.submit(t, ctl, map[string]any{
		"1": gateway.Node("SlowNode", map[string]any{"steps": 2, "step_ms": 12000}),
		"2": gateway.Node("TextOutput", map[string]any{"text": "done"}),
	})

	ctx := browser.New(t, browser.Options{TrustCertOf: fmt.Sprintf("127.0.0.1:%d", s.g.Port), TLS: s.g.TLSConfig(t)})
	// Any page of the site makes the stream same-origin; the job's JSON is one.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.g.URL+"/api/v2/jobs/"+job)); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	protocol, err := chromedp.Run(ctx, chromedp.Evaluate[string](`performance.getEntriesByType("navigation")[0].nextHopProtocol`))
	if err != nil || (protocol != "h2" && protocol != "h3") {
		t.Fatalf("the page came over %q (%v), want h2 or h3", protocol, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(followScript, "/api/v2/jobs/"+job+"/events"))); err != nil {
		t.Fatalf("open EventSource: %v", err)
	}

	wait, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](`window.followed.done`)); err != nil {
		t.Fatalf("waiting for the terminal status: %v", err)
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.followed)`))
	if err != nil {
		t.Fatal(err)
	}
	var got followed
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatal(err)
	}
	t.Logf("EventSource over %s: %s", protocol, raw)
	last := got.Events[len(got.Events)-1]
	progress, outputs := 0, 0
	var quiet int64
	for i, e := range got.Events {
		switch e.Name {
		case "progress":
			progress++
		case "output":
			outputs++
		}
		if i > 0 {
			quiet = max(quiet, e.At-got.Events[i-1].At)
		}
	}
	if got.Errors != 0 || got.Events[0].Name != "status" || progress < 2 || outputs != 1 ||
		last.Name != "status" || last.Status != "succeeded" {
		t.Errorf("the browser saw %d errors, %d progress, %d outputs, first %+v, last %+v", got.Errors, progress, outputs, got.Events[0], last)
	}
	if quiet < writeTimeout.Milliseconds() {
		t.Errorf("the longest pause between events was %d ms; the test means to cover one over %s", quiet, writeTimeout)
	}
}
