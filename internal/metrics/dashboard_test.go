package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDashboardUsesTheSeries: every comfygate_ series the Grafana
// dashboard queries exists, and every series exists on the dashboard.
func TestDashboardUsesTheSeries(t *testing.T) {
	raw, err := os.ReadFile("../../docs/grafana/comfygate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg, &State{}); err != nil {
		t.Fatal(err)
	}
	families := map[string]bool{}
	descs := make(chan *prometheus.Desc, 256)
	go func() {
		for _, c := range append(processCollectors, &State{}) {
			c.Describe(descs)
		}
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range descs {
		families[fqName.FindStringSubmatch(d.String())[1]] = true
	}
	used := map[string]bool{}
	series := regexp.MustCompile(`comfygate_[a-z_]+`)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, name := range series.FindAllString(tg.Expr, -1) {
				family := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if trimmed, ok := strings.CutSuffix(name, suffix); ok && families[trimmed] {
						family = trimmed
					}
				}
				if !families[family] {
					t.Errorf("panel %q queries %s, which comfygate does not export", p.Title, name)
				}
				used[family] = true
			}
		}
	}
	var unused []string
	for f := range families {
		if !used[f] {
			unused = append(unused, f)
		}
	}
	slices.Sort(unused)
	if len(unused) > 0 {
		t.Errorf("series not on the dashboard: %v", unused)
	}
}
