package integration

import (
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/redistest"
	"github.com/comfygate/comfygate/tests/gateway"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestOneJobPerKeyOnRedisHA: concurrent submits with one Idempotency-Key,
// spread over two gateways whose claims live on a Cluster (or behind
// Sentinel), create exactly one job.
func TestOneJobPerKeyOnRedisHA(t *testing.T) {
	t.Parallel()
	for _, tp := range redistest.Topologies(pgtest.RedisURL)[1:] {
		t.Run(tp.Name, func(t *testing.T) {
			t.Parallel()
			global := clusterGlobal(pgtest.DSN(t), tp.URL(t), "\t\t\tno_execute")
			blobs := t.TempDir()
			gws := []*gateway.Gateway{startMember(t, global, blobs), startMember(t, global, blobs)}
			key := uuid.NewString()
			var wg sync.WaitGroup
			var mu sync.Mutex
			ids := map[string]int{}
			refused := 0
			for i := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := submit(t, gws[i%2], map[string]any{"workflow": slowWorkflow(1)}, map[string]string{"Idempotency-Key": key})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case r.Status == http.StatusCreated:
						ids[r.JSON(t)["id"].(string)]++
					case r.Status == 422 && r.errorCode(t) == "idempotency_key_reuse":
						refused++
					default:
						t.Errorf("submit: %d %s", r.Status, r.Body)
					}
				}()
			}
			wg.Wait()
			list := do(t, http.MethodGet, gws[0].URL+"/api/v2/jobs?limit=100", nil, nil).JSON(t)
			if n := len(list["jobs"].([]any)); len(ids) != 1 || n != 1 {
				t.Fatalf("created %v (refused %d), %d jobs exist; want exactly one", ids, refused, n)
			}
		})
	}
}
