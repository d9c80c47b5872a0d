package bench

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/tests/bench/seed"
)

func TestZZGetProbe(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	ctx := context.Background()
	for _, n := range []int{10000, 200000} {
		s := embeddedScale(t, n)
		queued, err := s.st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 1, Statuses: []string{storage.JobQueued}})
		if err != nil || len(queued) == 0 {
			t.Fatal(err)
		}
		id := queued[0].ID
		ops := []struct {
			name string
			op   func() error
		}{
			{"GetJob", func() error { _, err := s.st.GetJob(ctx, seed.BusyAccount, id); return err }},
			{"ListBusy", func() error {
				_, err := s.st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 100})
				return err
			}},
			{"ListQuiet", func() error {
				_, err := s.st.ListJobs(ctx, seed.QuietAccount, storage.JobQuery{Limit: 100})
				return err
			}},
			{"Claim", func() error {
				_, err := s.st.ClaimJob(ctx, "builtin", "bench", time.Minute, 0, func(string) error { return nil })
				return err
			}},
		}
		for _, o := range ops {
			var lat []time.Duration
			k := 2000
			if o.name != "GetJob" {
				k = 500
			}
			for i := 0; i < k; i++ {
				t0 := time.Now()
				if err := o.op(); err != nil {
					t.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			t.Logf("n=%d %s p50=%v p99=%v", n, o.name, lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))
		}
	}
}
