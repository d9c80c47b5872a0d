// Package metrics scrapes a real gateway's /metrics (Caddy's admin
// endpoint) around scripted work and checks that each comfygate_ series
// moved by exactly what the work implies.
package metrics

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/comfygate/comfygate/tests/gateway"
)

// scrape is one reading of a gateway's /metrics.
type scrape map[string]*dto.MetricFamily

func scrapeAt(t *testing.T, admin string) scrape {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("scraping: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
}

// value is the sum of the series of family name whose labels include
// every pair of labels ("k=v" strings); a histogram counts observations.
func (s scrape) value(name string, labels ...string) float64 {
	f := s[name]
	if f == nil {
		return 0
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want []string) bool {
	have := map[string]string{}
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for _, kv := range want {
		k, v, _ := strings.Cut(kv, "=")
		if have[k] != v {
			return false
		}
	}
	return true
}

// change is one expected movement of a series between two scrapes.
type change struct {
	name   string
	labels []string
	delta  float64
}

// checkChanges compares every expected change, and reports each
// comfygate_ series that moved without being expected (so the list is the
// whole story, not a sample).
func checkChanges(t *testing.T, before, after scrape, want []change) {
	t.Helper()
	expected := map[string]bool{}
	for _, c := range want {
		got := after.value(c.name, c.labels...) - before.value(c.name, c.labels...)
		if got != c.delta {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.delta)
		}
		expected[c.name] = true
	}
	var surprises []string
	for name := range after {
		if !strings.HasPrefix(name, "comfygate_") || expected[name] {
			continue
		}
		if after.value(name) != before.value(name) {
			surprises = append(surprises, fmt.Sprintf("%s %v→%v", name, before.value(name), after.value(name)))
		}
	}
	sort.Strings(surprises)
	if len(surprises) > 0 {
		t.Errorf("series that moved unexpectedly: %v", surprises)
	}
}

// startGateway runs a gateway with the admin endpoint on a port of its own
// and returns it with the admin address.
func startGateway(t *testing.T, caddyfile string, opts gateway.Options) (*gateway.Gateway, string) {
	t.Helper()
	admin := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
	cfg := strings.Replace(caddyfile, "{ADMIN}", admin, 1)
	return gateway.Start(t, cfg, opts), admin
}
