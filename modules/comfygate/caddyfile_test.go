package comfygate

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/comfygate/comfygate/internal/jobs"
)

// appCase is a comfygate block's body and what it must give: the error
// its configuration fails with (a substring), or an app check passes.
type appCase struct {
	name    string
	block   string
	wantErr string
	check   func(t *testing.T, a *App)
}

func runAppCases(t *testing.T, cases []appCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			a, err := provisionedApp(tt.block)
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

// provisionedApp is the app of a comfygate block's body, with its defaults
// applied, its configuration validated and its pools provisioned.
func provisionedApp(block string) (*App, error) {
	a := new(App)
	if err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser("comfygate {\n" + block + "\n}")); err != nil {
		return nil, err
	}
	a.applyDefaults()
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return a, a.provisionPools()
}

// The pool price and the per-account bounds: what parses, and what the
// parser or the app's validation refuses.
func TestPoolPriceOptions(t *testing.T) {
	tests := []appCase{
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
	runAppCases(t, tests)
}

// The built-in executor's memory: one process budget for every builtin
// pool, a bound per job on each.
func TestBuiltinMemoryOptions(t *testing.T) {
	builtinExec := func(a *App, pool string) *jobs.BuiltinExecutor { return a.executors[pool].exec.(*jobs.BuiltinExecutor) }
	tests := []appCase{
		{"defaults", ``, "", func(t *testing.T, a *App) {
			b := builtinExec(a, BuiltinPool)
			if b.Memory.Limit() != 1<<30 || b.JobMemory != 512<<20 {
				t.Fatalf("budget %d, job %d; want 1 GiB and 512 MiB", b.Memory.Limit(), b.JobMemory)
			}
		}},
		{"a small process", `builtin_memory 256MiB`, "", func(t *testing.T, a *App) {
			if b := builtinExec(a, BuiltinPool); b.Memory.Limit() != 256<<20 || b.JobMemory != 256<<20 {
				t.Fatalf("budget %d, job %d; want 256 MiB for both", b.Memory.Limit(), b.JobMemory)
			}
		}},
		{"pools share the process's budget", `builtin_memory 4GiB
			pool big builtin {
				job_memory 3GiB
			}
			pool small builtin {
				job_memory 100MB
			}`, "", func(t *testing.T, a *App) {
			big, small, def := builtinExec(a, "big"), builtinExec(a, "small"), builtinExec(a, BuiltinPool)
			if big.Memory != small.Memory || big.Memory != def.Memory || big.Memory.Limit() != 4<<30 {
				t.Fatal("the builtin pools do not share one budget of 4 GiB")
			}
			if big.JobMemory != 3<<30 || small.JobMemory != 100_000_000 || def.JobMemory != 512<<20 {
				t.Fatalf("job bounds %d, %d, %d", big.JobMemory, small.JobMemory, def.JobMemory)
			}
		}},
		{"a job over the process", `pool big builtin {
				job_memory 2GiB
			}`, "job_memory must be positive and at most builtin_memory", nil},
		{"a comfyui pool", `pool gpu comfyui {
				job_memory 1GiB
			}`, "job_memory bounds builtin pools only", nil},
		{"not a size", `builtin_memory lots`, "builtin_memory:", nil},
		{"negative", `builtin_memory -1`, "builtin_memory:", nil},
	}
	runAppCases(t, tests)
}
