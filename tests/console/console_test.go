// Package console drives the operator console (comfy_console) of a real
// gateway in a headless Chromium.
package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/comfygate/comfygate/tests/browser"
	"github.com/comfygate/comfygate/tests/gateway"
)

const consoleToken = "console-token-for-tests-0123"

// consoleSite serves the console under /console/ and the v2 API (no auth)
// beside it, on one built-in worker slot.
func consoleSite() string {
	return `{
	admin off
	grace_period 1s
	comfygate {
		storage embedded ./data
		jobs {
			concurrency 1
		}
	}
}
http://:{PORT} {
	bind 127.0.0.1
	handle_path /console/* {
		error_envelope
		comfy_console {
			token ` + consoleToken + `
		}
	}
	route {
		error_envelope
		comfy_auth none
		idempotency
		comfy_assets
		comfy_jobs
		error "not found" 404
	}
}
`
}

// TestConsoleInBrowser: a wrong credential gets no data; with the right one
// the console shows a job submitted through the API go from queued to
// succeeded, with a progress bar and its output's thumbnail, without a
// reload, and the job's nodes in its detail; the page logs no error.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, consoleSite(), gateway.Options{})
	if r := gateway.Upload(t, http.DefaultClient, g.URL, gateway.GradientPNG(t, 96), "console.png", "image/png", nil); r.Status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}

	if r := gateway.Do(t, http.MethodGet, g.URL+"/console/api/jobs", nil,
		map[string]string{"Authorization": "Bearer not-the-token"}); r.Status != http.StatusUnauthorized {
		t.Fatalf("console API with a wrong token: %d %s", r.Status, r.Body)
	}

	ctx := browser.New(t, browser.Options{})
	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line))
				mu.Unlock()
			}
		}
	}()

	run(t, ctx, chromedp.Navigate(g.URL+"/console/"))
	signIn(t, ctx, "not-the-token")
	waitFor(t, ctx, `document.getElementById("signin-error").textContent !== ""`)
	if rows := eval[float64](t, ctx, `document.querySelectorAll("#jobs tbody tr").length`); rows != 0 {
		t.Fatalf("a wrong credential shows %v job rows", rows)
	}
	if !eval[bool](t, ctx, `document.getElementById("main").hidden`) {
		t.Fatal("a wrong credential opened the console")
	}
	// The browser logs the refused requests (401) as errors: those were
	// the point. From here on the page must log none.
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	problems = nil
	mu.Unlock()

	signIn(t, ctx, consoleToken)
	waitFor(t, ctx, `document.querySelector("#pools .card") !== null`)
	eval[bool](t, ctx, `(window.__sameDocument = true)`)

	blocker := submit(t, g, gateway.BlurWorkflow(6))
	target := submit(t, g, gateway.InvertWorkflow("console.png", "console"))
	row := fmt.Sprintf(`document.querySelector('tr[data-job=%q]')`, target)
	seen := map[string]bool{}
	canceled := false
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := eval[string](t, ctx, `(`+row+` || {dataset: {}}).dataset.status || ""`)
		seen[st] = true
		if st == "queued" && !canceled {
			gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+blocker+"/cancel", nil, nil)
			canceled = true
		}
		if st == "succeeded" && eval[bool](t, ctx, row+`.querySelector("img.thumb")?.naturalWidth > 0`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console never showed the job succeeded with its thumbnail; saw %v", seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !seen["queued"] {
		t.Errorf("the console never showed the job queued; saw %v", seen)
	}
	if v := eval[float64](t, ctx, row+`.querySelector("progress").value`); v != 1 {
		t.Errorf("a succeeded job's progress bar reads %v", v)
	}
	if !eval[bool](t, ctx, `window.__sameDocument === true`) {
		t.Error("the page reloaded")
	}

	list, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	saveArtifact(t, "console-jobs.png", list)

	run(t, ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf("tr[data-job=%q]", target))))
	waitFor(t, ctx, `[...document.querySelectorAll("#detail-nodes li b")].some((b) => b.textContent === "ImageInvert")`)
	waitFor(t, ctx, `document.querySelector("#detail-outputs img")?.naturalWidth > 0`)

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100) /* 100: PNG */)
	if err != nil {
		t.Fatal(err)
	}
	saveArtifact(t, "console-job.png", shot)
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the page logged errors: %v", problems)
	}
}

func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// waitFor polls a JavaScript condition for up to 30 s.
func waitFor(t *testing.T, ctx context.Context, cond string) {
	t.Helper()
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](cond)); err != nil {
		t.Fatalf("waiting for %s: %v", cond, err)
	}
}

func signIn(t *testing.T, ctx context.Context, token string) {
	t.Helper()
	// A click on the button, as a person signs in (form.submit() would
	// skip the page's submit handler).
	run(t, ctx, chromedp.WaitVisible(chromedp.ID("token")), chromedp.SetValue(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)))
}

// saveArtifact writes a file the test produced for people to look at, in
// $COMFYGATE_TEST_ARTIFACTS (default: comfygate-test-artifacts in the
// temp dir).
func saveArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	dir := os.Getenv("COMFYGATE_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "comfygate-test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("artifact: %s", p)
}

func submit(t *testing.T, g *gateway.Gateway, wf map[string]any) string {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"workflow": wf})
	r := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs", bytes.NewReader(raw), map[string]string{"Content-Type": "application/json"})
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}
