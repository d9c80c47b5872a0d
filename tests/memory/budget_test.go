package memory

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/bombs"
	"github.com/comfygate/comfygate/tests/gateway"
)

// budgetSite is the v2 API on the built-in pool with a memory budget of
// 1 GiB for the process and 640 MiB a job, four jobs at once.
const budgetSite = `
		storage embedded ./data
		builtin_memory 1GiB
		jobs {
			concurrency 4
		}
		pool builtin builtin {
			job_memory 640MiB
		}`

const processBudget, jobBudget = 1 << 30, 640 * mib

// TestBuiltinMemoryBudget measures the gateway's peak RSS above idle while
// the built-in executor runs: workflows that would exceed a job's 640 MiB
// fail before any pixel is allocated (at submit when the widgets show it,
// else before the first node), four concurrent heavy workflows (384 MiB
// each, 1.5 GiB together) stay within the 1 GiB budget and all succeed,
// and ordinary workflows (2048² blurs, upscales) run. Before the budget,
// EmptyImage 8192² → ImageInvert → PreviewImage took a gateway from
// 223 MiB to 1.9-2.46 GB.
func TestBuiltinMemoryBudget(t *testing.T) {
	skipUnlessLinux(t)
	t.Run("over a job's budget", func(t *testing.T) {
		g, p, idle := budgetGateway(t)
		heavy16 := bombs.PNG(12000, 12000, 6, 16, false) // 1.1 MB; decoding it takes 1.1 GB, its tensor 1.6 GiB
		if r := gateway.Upload(t, http.DefaultClient, g.URL, heavy16, "heavy16.png", "image/png", nil); r.Status != http.StatusCreated {
			t.Fatalf("upload: %d %s", r.Status, r.Body)
		}
		p.resetPeak()
		cases := []struct {
			name  string
			graph map[string]any
			node  string // refused at submit on this node; "" = refused when it runs
		}{
			{"EmptyImage 8192² → ImageInvert → PreviewImage", previewOf(invertOf(emptyImage(8192, 8192, 1))), "1"},
			{"EmptyImage 4096² batch 8", previewOf(emptyImage(4096, 4096, 8)), "1"},
			{"EmptyImage 4096² → ImageScaleBy 2 → PreviewImage", previewOf(scaleBy(emptyImage(4096, 4096, 1), "bicubic", 2)), "2"},
			{"LoadImage of a 12000² 16-bit RGBA PNG", previewOf(map[string]any{"1": node("LoadImage", map[string]any{"image": "heavy16.png"})}), ""},
		}
		for _, tc := range cases {
			r := submit(t, g.URL, tc.graph)
			if tc.node != "" {
				envelope(t, tc.name, r, http.StatusUnprocessableEntity, "invalid_workflow")
				ne, _ := r.JSON(t)["error"].(map[string]any)["details"].(map[string]any)["node_errors"].(map[string]any)
				if entries, _ := ne[tc.node].([]any); len(entries) != 1 || !strings.Contains(
					entries[0].(map[string]any)["message"].(string), "over the 640 MiB one job may use") {
					t.Errorf("%s: node_errors %v, want node %s over the 640 MiB", tc.name, ne, tc.node)
				}
				continue
			}
			if r.Status != http.StatusCreated {
				t.Fatalf("%s: %d %s", tc.name, r.Status, r.Body)
			}
			job := gateway.WaitJob(t, g.URL, r.JSON(t)["id"].(string), time.Minute, gateway.Terminal)
			if status, code, msg := jobError(job); status != "failed" || code != "node_execution_error" || !strings.Contains(msg, "over the 640 MiB one job may use") {
				t.Errorf("%s: %s %s %q, want failed with node_execution_error over the 640 MiB", tc.name, status, code, msg)
			}
		}
		peak := p.peak()
		t.Logf("refusing them: peak RSS %d MiB, %+d MiB from idle", peak/mib, (peak-idle)/mib)
		if peak-idle > 100*mib {
			t.Errorf("refusing them took the gateway from %d MiB to %d MiB", idle/mib, peak/mib)
		}
	})

	t.Run("four heavy workflows at once", func(t *testing.T) {
		g, p, idle := budgetGateway(t)
		p.resetPeak()
		// EmptyImage 4096² → ImageBlur → ImageInvert → PreviewImage holds
		// two 192 MiB tensors at a time: 384 MiB a job, 1.5 GiB for four.
		heavy := previewOf(invertOf(blur(emptyImage(4096, 4096, 1), 4)))
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { run(t, g, heavy, "succeeded") })
		}
		wg.Wait()
		peak := p.peak()
		t.Logf("four heavy workflows: peak RSS %d MiB, %+d MiB from idle (budget %d MiB)", peak/mib, (peak-idle)/mib, processBudget/mib)
		if peak-idle > processBudget+100*mib {
			t.Errorf("four heavy workflows took the gateway from %d MiB to %d MiB, over its %d MiB budget", idle/mib, peak/mib, processBudget/mib)
		}
	})

	t.Run("ordinary workflows", func(t *testing.T) {
		g, p, idle := budgetGateway(t)
		if r := gateway.Upload(t, http.DefaultClient, g.URL, gateway.GradientPNG(t, 2048), "photo.png", "image/png", nil); r.Status != http.StatusCreated {
			t.Fatalf("upload: %d %s", r.Status, r.Body)
		}
		p.resetPeak()
		for name, graph := range map[string]map[string]any{
			"2048² blur":             saveOf(blur(emptyImage(2048, 2048, 1), 31), "blur"),
			"2048² bicubic ×2":       saveOf(scaleBy(emptyImage(2048, 2048, 1), "bicubic", 2), "bicubic"),
			"1024² lanczos ×2":       saveOf(scaleBy(emptyImage(1024, 1024, 1), "lanczos", 2), "lanczos"),
			"a 2048² input ×2, blur": saveOf(blur(scaleBy(map[string]any{"1": node("LoadImage", map[string]any{"image": "photo.png"})}, "bilinear", 2), 8), "photo"),
		} {
			t.Run(name, func(t *testing.T) { run(t, g, graph, "succeeded") })
		}
		peak := p.peak()
		t.Logf("ordinary workflows: peak RSS %d MiB, %+d MiB from idle", peak/mib, (peak-idle)/mib)
		if peak-idle > jobBudget+100*mib {
			t.Errorf("ordinary workflows took the gateway from %d MiB to %d MiB", idle/mib, peak/mib)
		}
	})
}

// budgetGateway starts a gateway on budgetSite, runs a small job and
// returns it with its idle RSS.
func budgetGateway(t *testing.T) (*gateway.Gateway, process, int64) {
	g := gateway.Start(t, gateway.V2Config(budgetSite, gateway.V2Site{}), gateway.Options{})
	p := process{t: t, pid: g.PID()}
	run(t, g, saveOf(emptyImage(64, 64, 1), "warm"), "succeeded")
	idle := p.idle()
	t.Logf("idle RSS %d MiB", idle/mib)
	return g, p, idle
}

// run submits graph and waits for it to end in want.
func run(t *testing.T, g *gateway.Gateway, graph map[string]any, want string) {
	t.Helper()
	r := submit(t, g.URL, graph)
	if r.Status != http.StatusCreated {
		t.Errorf("submit: %d %s", r.Status, r.Body)
		return
	}
	job := gateway.WaitJob(t, g.URL, r.JSON(t)["id"].(string), 5*time.Minute, gateway.Terminal)
	if status, code, msg := jobError(job); status != want {
		t.Errorf("job %s: %s %s %q, want %s", job["id"], status, code, msg, want)
	}
}

// Workflow builders: each adds a node after the graph's last one (the
// highest id) and reads its output.

func emptyImage(w, h, batch int) map[string]any {
	return map[string]any{"1": node("EmptyImage", map[string]any{"width": w, "height": h, "batch_size": batch, "color": 0x336699})}
}

func then(g map[string]any, class string, inputs map[string]any, socket string) map[string]any {
	last := len(g)
	inputs[socket] = link(string(rune('0' + last)))
	g[string(rune('0'+last+1))] = node(class, inputs)
	return g
}

func invertOf(g map[string]any) map[string]any {
	return then(g, "ImageInvert", map[string]any{}, "image")
}

func blur(g map[string]any, radius int) map[string]any {
	return then(g, "ImageBlur", map[string]any{"blur_radius": radius, "sigma": 2.0}, "image")
}

func scaleBy(g map[string]any, method string, s float64) map[string]any {
	return then(g, "ImageScaleBy", map[string]any{"upscale_method": method, "scale_by": s}, "image")
}

func previewOf(g map[string]any) map[string]any {
	return then(g, "PreviewImage", map[string]any{}, "images")
}

func saveOf(g map[string]any, prefix string) map[string]any {
	return then(g, "SaveImage", map[string]any{"filename_prefix": prefix}, "images")
}
