package comfygate

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"
)

// The fleet options of a comfyui pool: workers dns and the dispatch
// policy; what parses, and what the parser or the pool refuses.
func TestPoolFleetOptions(t *testing.T) {
	tests := []struct {
		name    string
		block   string
		wantErr string
		check   func(t *testing.T, p *PoolConfig)
	}{
		{"dns only, with options", `pool gpu comfyui {
				workers dns _comfyui._tcp.gpu.internal {
					refresh 10s
					resolver 127.0.0.1:5353
					scheme https
					concurrency 2
					header X-Token abc
				}
				workers dns comfy.gpu.internal 8190
				dispatch least_busy
				affinity_wait 5s
				affinity_models 3
			}`, "", func(t *testing.T, p *PoolConfig) {
			want := ComfyUIDNS{Name: "_comfyui._tcp.gpu.internal", Refresh: caddy.Duration(10 * time.Second),
				Resolver: "127.0.0.1:5353", Scheme: "https", Concurrency: 2, Headers: map[string]string{"X-Token": "abc"}}
			if len(p.DNS) != 2 || p.DNS[0].Name != want.Name || p.DNS[0].Refresh != want.Refresh || p.DNS[0].Resolver != want.Resolver ||
				p.DNS[0].Scheme != want.Scheme || p.DNS[0].Concurrency != 2 || p.DNS[0].Headers["X-Token"] != "abc" {
				t.Fatalf("dns = %+v", p.DNS)
			}
			if p.DNS[1].Name != "comfy.gpu.internal" || p.DNS[1].Port != 8190 {
				t.Fatalf("second dns = %+v", p.DNS[1])
			}
			if p.Dispatch != "least_busy" || p.AffinityWait != caddy.Duration(5*time.Second) || p.AffinityModels != 3 {
				t.Fatalf("dispatch %q wait %v models %d", p.Dispatch, p.AffinityWait, p.AffinityModels)
			}
		}},
		{"no port name", `pool gpu comfyui {
				workers dns
			}`, "want: workers dns <name> [<port>]", nil},
		{"not dns", `pool gpu comfyui {
				workers srv x
			}`, "want: workers dns <name> [<port>]", nil},
		{"bad port", `pool gpu comfyui {
				workers dns x.internal http
			}`, "workers dns port", nil},
		{"unknown dns option", `pool gpu comfyui {
				workers dns x.internal {
					weight 3
				}
			}`, "unknown workers dns option", nil},
		{"bad scheme", `pool gpu comfyui {
				workers dns x.internal {
					scheme ftp
				}
			}`, "scheme must be http or https", nil},
		{"bad dispatch", `pool gpu comfyui {
				worker http://127.0.0.1:8188
				dispatch random
			}`, "dispatch \"random\"", nil},
		{"no workers at all: a pool at zero with its scale bounds", `pool gpu comfyui {
				refresh 1m
				scale {
					min_workers 1
					max_workers 8
					worker_concurrency 2
					scale_down_delay 90s
					retry_after_max 45s
					target_queue_time 20s
				}
			}`, "", func(t *testing.T, p *PoolConfig) {
			want := ScaleConfig{MinWorkers: 1, MaxWorkers: 8, WorkerConcurrency: 2,
				ScaleDownDelay: caddy.Duration(90 * time.Second), RetryAfterMax: caddy.Duration(45 * time.Second),
				TargetQueueTime: caddy.Duration(20 * time.Second)}
			if len(p.Workers) != 0 || len(p.DNS) != 0 || p.Scale == nil || *p.Scale != want {
				t.Fatalf("pool at zero: workers %v dns %v scale %+v", p.Workers, p.DNS, p.Scale)
			}
		}},
		{"scale min above max", `pool gpu comfyui {
				scale {
					min_workers 3
					max_workers 2
				}
			}`, "min_workers 3 is above max_workers 2", nil},
		{"scale negative", `pool gpu comfyui {
				scale {
					max_workers -1
				}
			}`, "must not be negative", nil},
		{"scale negative target queue time", `pool gpu comfyui {
				scale {
					target_queue_time -5s
				}
			}`, "must not be negative", nil},
		{"unknown scale option", `pool gpu comfyui {
				scale {
					target 3
				}
			}`, "unknown scale option", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &App{logger: zap.NewNop()}
			err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser("comfygate {\n" + tt.block + "\n}"))
			if err == nil {
				a.applyDefaults()
				if err = a.Validate(); err == nil {
					err = a.provisionPools()
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, a.Pools[0])
			for _, key := range a.poolKeys {
				_, _ = pool.Delete(key) // close the pools this test built
			}
		})
	}
}
