package console

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/comfygate/comfygate/tests/browser"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestJobColumnTellsJobsApart (issue 26, item 3): job ids are UUIDv7,
// whose leading characters are their creation time, so two jobs created in
// the same second begin alike; the console's Job column must still show
// them differently, with the whole id on hover.
func TestJobColumnTellsJobsApart(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, consoleSite(), gateway.Options{})
	quick := map[string]any{
		"1": gateway.Node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
		"2": gateway.Node("SaveImage", map[string]any{"filename_prefix": "q", "images": []any{"1", 0}}),
	}
	var ids [2]string
	for range 5 { // the leading 8 characters change every 65 s: retry across a change
		ids[0] = submit(t, g, quick)
		ids[1] = submit(t, g, quick)
		if ids[0][:8] == ids[1][:8] {
			break
		}
	}
	if ids[0][:8] != ids[1][:8] {
		t.Fatalf("ids %s and %s do not share their time prefix", ids[0], ids[1])
	}

	ctx := browser.New(t, browser.Options{})
	run(t, ctx, chromedp.Navigate(g.URL+"/console/"))
	signIn(t, ctx, consoleToken)
	var cells [2]string
	for i, id := range ids {
		cell := fmt.Sprintf(`document.querySelector('tr[data-job=%q] td:nth-child(4) code')`, id)
		waitFor(t, ctx, cell+` !== null`)
		cells[i] = eval[string](t, ctx, cell+`.textContent`)
		if title := eval[string](t, ctx, cell+`.title`); title != id {
			t.Errorf("job %s: the Job cell's title is %q, want the whole id", id, title)
		}
		if shown := strings.TrimLeft(cells[i], "…"); shown == "" || !strings.Contains(id, shown) {
			t.Errorf("job %s: the Job cell shows %q, not a part of the id", id, cells[i])
		}
	}
	if cells[0] == cells[1] {
		t.Errorf("jobs %s and %s, created together, both show %q in the Job column", ids[0], ids[1], cells[0])
	}
}
