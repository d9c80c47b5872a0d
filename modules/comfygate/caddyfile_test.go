package comfygate

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// The pool price and the per-account bounds: what parses, and what the
// parser or the app's validation refuses.
func TestPoolPriceOptions(t *testing.T) {
	tests := []struct {
		name    string
		block   string
		wantErr string
		check   func(t *testing.T, a *App)
	}{
		{"price and bounds", `pool gpu builtin {
				price {
					per_job 3
					per_second 2
				}
				max_charge 100
				account_max_queued 5
			}
			jobs {
				account_max_running 2
				running_bound 1m
			}`, "", func(t *testing.T, a *App) {
			pe := a.executors["gpu"]
			if pe.price == nil || pe.price.PerJob != 3 || pe.price.PerSecond != 2 || pe.price.Reserve != 100 {
				t.Fatalf("price = %+v", pe.price)
			}
			if pe.accountMaxQueued != 5 || pe.accountMaxRunning != 2 {
				t.Fatalf("bounds = %d, %d", pe.accountMaxQueued, pe.accountMaxRunning)
			}
			if a.executors[BuiltinPool].price != nil {
				t.Fatal("the unpriced builtin pool has a price")
			}
		}},
		{"reserve from the running bound", `pool gpu builtin {
				price {
					per_second 2
				}
			}
			jobs {
				running_bound 1m
			}`, "", func(t *testing.T, a *App) {
			if p := a.executors["gpu"].price; p == nil || p.Reserve != 120 {
				t.Fatalf("price = %+v, want a reserve of 2 × 60 s", p)
			}
		}},
		{"fractional credits", `pool gpu builtin {
				price {
					per_job 1.5
				}
			}`, "whole credits", nil},
		{"unknown price option", `pool gpu builtin {
				price {
					per_minute 1
				}
			}`, "unknown price option", nil},
		{"max_charge without a price", `pool gpu builtin {
				max_charge 5
			}`, "max_charge needs a price", nil},
		{"free price", `pool gpu builtin {
				price {
					per_job 0
				}
			}`, "needs per_job or per_second", nil},
		{"negative bound", `jobs {
				account_max_queued -1
			}`, "must not be negative", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := new(App)
			err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser("comfygate {\n" + tt.block + "\n}"))
			if err == nil {
				a.applyDefaults()
				if err = a.provisionPools(); err == nil {
					err = a.Validate()
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
			tt.check(t, a)
		})
	}
}
