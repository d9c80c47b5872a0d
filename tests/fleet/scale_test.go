package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// scaleReport is GET /comfygate/scale/<pool> (KEDA metrics-api reads
// desiredWorkers).
type scaleReport struct {
	Pool             string  `json:"pool"`
	DesiredWorkers   int     `json:"desiredWorkers"`
	NeededWorkers    int     `json:"neededWorkers"`
	QueuedJobs       int64   `json:"queuedJobs"`
	RunningJobs      int64   `json:"runningJobs"`
	MinWorkers       int     `json:"minWorkers"`
	MaxWorkers       int     `json:"maxWorkers"`
	DemandUnmet      bool    `json:"demandUnmet"`
	ColdStartSeconds float64 `json:"coldStartSeconds"`
	MeanJobSeconds   float64 `json:"meanJobSeconds"`
	JobSamples       int     `json:"jobSamples"`
	TargetQueue      float64 `json:"targetQueueSeconds"`
}

func getScale(t *testing.T, admin, pool string) scaleReport {
	t.Helper()
	resp, err := http.Get(admin + "/comfygate/scale/" + pool)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r scaleReport
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&r) != nil {
		t.Fatalf("GET scale: %d", resp.StatusCode)
	}
	return r
}

// series reads the gauges of pool from admin's /metrics.
func series(t *testing.T, admin, pool string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.HasPrefix(name, "comfygate_pool_") || !strings.Contains(rest, `pool="`+pool+`"`) {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("series line %q", line)
		}
		key := name
		if b, ok := strings.CutPrefix(labels, `bound="`); ok {
			key += ":" + strings.SplitN(b, `"`, 2)[0]
		}
		if h := strings.Index(labels, `health="`); h >= 0 {
			continue // this gateway's own workers, not the shared signal
		}
		out[key] = v
	}
	return out
}

// signal is what both gateways must agree on: the JSON and the series.
type signal struct {
	JSON   scaleReport
	Series map[string]float64
}

func readSignal(t *testing.T, admin string) signal {
	return signal{getScale(t, admin, "gpu"), series(t, admin, "gpu")}
}

// agree reads the signal of both gateways until a stable reading (the
// first gateway's read twice, the same) and checks the second's equals it
// and the series equal the JSON.
func agree(t *testing.T, what string, adminA, adminB string) scaleReport {
	t.Helper()
	var a1, b, a2 signal
	for try := 0; try < 50; try++ {
		a1, b, a2 = readSignal(t, adminA), readSignal(t, adminB), readSignal(t, adminA)
		if reflect.DeepEqual(a1, a2) && reflect.DeepEqual(a1, b) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !reflect.DeepEqual(a1, b) {
		t.Fatalf("%s: the gateways disagree:\n A %+v\n B %+v", what, a1, b)
	}
	j, s := a1.JSON, a1.Series
	demand := 0.0
	if j.DemandUnmet {
		demand = 1
	}
	want := map[string]float64{"comfygate_pool_desired_workers": float64(j.DesiredWorkers),
		"comfygate_pool_needed_workers": float64(j.NeededWorkers), "comfygate_pool_workers_bound:min": float64(j.MinWorkers),
		"comfygate_pool_workers_bound:max": float64(j.MaxWorkers), "comfygate_pool_demand_unmet": demand,
		"comfygate_pool_cold_start_seconds": j.ColdStartSeconds}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("%s: the series %v do not match the JSON %+v", what, s, j)
	}
	return j
}

// TestScaleSignalAcrossGateways (issue 29, acceptance 4): two gateways on
// one database serve the same scale signal, as KEDA metrics-api JSON and
// as Prometheus series, through a pool's life from zero: idle, demand
// refused at zero, a worker added (cold start measured), a queue, and back
// to zero after the scale-down delay.
func TestScaleSignalAcrossGateways(t *testing.T) {
	dsn := pgtest.DSN(t)
	cfg := `storage postgres "` + dsn + `"
		blobs file_system ./data/blobs
		pool gpu comfyui {
			scale {
				max_workers 4
				worker_concurrency 2
				scale_down_delay 6s
			}
			unhealthy_after 3s
		}`
	adminA := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
	adminB := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
	a := gateway.Start(t, gateway.V2Config(cfg, gateway.V2Site{Pool: "gpu", Admin: adminA}), gateway.Options{})
	gateway.Start(t, gateway.V2Config(cfg, gateway.V2Site{Pool: "gpu", Admin: adminB}), gateway.Options{})
	adminA, adminB = "http://"+adminA, "http://"+adminB

	if j := agree(t, "idle at zero", adminA, adminB); j.DesiredWorkers != 0 || j.MaxWorkers != 4 {
		t.Fatalf("idle at zero: %+v", j)
	}
	// A submission to the pool at zero (no worker ever): 503 with a
	// Retry-After, counted as demand.
	client := &http.Client{Timeout: 30 * time.Second}
	_, err := submitJob(t, client, a.URL, slowJob(1, 0, "x"))
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("submit at zero: %v, want a 503", err)
	}
	if j := agree(t, "demand at zero", adminA, adminB); j.DesiredWorkers != 1 || !j.DemandUnmet {
		t.Fatalf("demand at zero: %+v", j)
	}
	// A worker joins gateway A: the demand is met, its cold start measured.
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	adminCall(t, http.MethodPost, adminA+"/comfygate/workers/gpu", map[string]any{"url": peer.URL})
	waitFor(t, "the demand met", func() bool { return getScale(t, adminA, "gpu").ColdStartSeconds > 0 })
	if j := agree(t, "demand met", adminA, adminB); j.DemandUnmet || j.DesiredWorkers != 1 {
		t.Fatalf("demand met: %+v", j)
	}
	// Seven jobs on a worker of concurrency 1: 7 queued + running → 4
	// workers of 2, at most 4.
	var ids []string
	for i := range 7 {
		id, err := submitJob(t, client, a.URL, slowJob(10, 100, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if j := agree(t, "queue", adminA, adminB); j.DesiredWorkers != 4 || j.QueuedJobs+j.RunningJobs < 6 {
		t.Fatalf("queue: %+v", j)
	}
	// Five left: 3 needed, 4 held by the scale-down delay.
	waitFor(t, "two jobs done", func() bool {
		j := getScale(t, adminA, "gpu")
		return j.QueuedJobs+j.RunningJobs <= 5
	})
	if j := agree(t, "hold", adminA, adminB); j.DesiredWorkers != 4 || j.NeededWorkers > 3 {
		t.Fatalf("hold: %+v", j)
	}
	waitAll(t, client, a.URL, ids, time.Minute)
	// Idle: back to zero once the delay passed.
	waitFor(t, "the signal back to zero", func() bool { return getScale(t, adminA, "gpu").DesiredWorkers == 0 })
	if j := agree(t, "idle again", adminA, adminB); j.DesiredWorkers != 0 || j.NeededWorkers != 0 {
		t.Fatalf("idle again: %+v", j)
	}
}
