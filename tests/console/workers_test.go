package console

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/comfygate/comfygate/tests/browser"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestConsoleShowsDrainingWorker (issue 29): the pools card lists a comfyui
// pool's workers by URL with their state; a worker that announced its
// shutdown shows as draining, with the reason.
func TestConsoleShowsDrainingWorker(t *testing.T) {
	t.Parallel()
	up, down := comfyuipeer.New(t, comfyuipeer.Options{}), comfyuipeer.New(t, comfyuipeer.Options{})
	site := strings.Replace(consoleSite(), `		jobs {
			concurrency 1
		}`, `		pool gpu comfyui {
			worker `+up.URL+`
			worker `+down.URL+`
			reconnect_max 200ms
		}`, 1)
	g := gateway.Start(t, site, gateway.Options{})
	ctx := browser.New(t, browser.Options{})
	run(t, ctx, chromedp.Navigate(g.URL+"/console/"))
	signIn(t, ctx, consoleToken)
	card := `[...document.querySelectorAll("#pools .card")].map((c) => c.textContent).join("\n")`
	waitFor(t, ctx, card+`.includes(`+jsString(up.URL+": healthy")+`) && `+card+`.includes(`+jsString(down.URL+": healthy")+`)`)
	down.Terminate()
	waitFor(t, ctx, card+`.includes(`+jsString(down.URL+": draining (shutdown)")+`)`)
	if text := eval[string](t, ctx, card); !strings.Contains(text, up.URL+": healthy, 0/1 running") {
		t.Fatalf("the pools card: %s", text)
	}
}

func jsString(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
