package comfygate

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// The redis option takes the three forms of storage/redisconn, with
// {env.X} placeholders, and a bad address fails validation (offline)
// without echoing a password.
func TestRedisOption(t *testing.T) {
	t.Setenv("CG_TEST_REDIS_PW", "s3cret")
	for _, tc := range []struct{ name, arg, want, wantErr string }{
		{"single", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", ""},
		{"sentinel", "redis-sentinel://:{env.CG_TEST_REDIS_PW}@10.0.0.1,10.0.0.2:26380/mymaster",
			"redis-sentinel://:s3cret@10.0.0.1,10.0.0.2:26380/mymaster", ""},
		{"cluster", "redis-cluster://n1:7000,n2:7001", "redis-cluster://n1:7000,n2:7001", ""},
		{"sentinel without master", "redis-sentinel://:{env.CG_TEST_REDIS_PW}@10.0.0.1", "", "master name"},
		{"unknown scheme", "http://x", "", "unknown scheme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := new(App)
			if err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser("comfygate {\nredis " + tc.arg + "\n}")); err != nil {
				t.Fatal(err)
			}
			a.applyDefaults()
			err := a.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("err %q echoes the password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Redis != tc.want {
				t.Fatalf("redis = %q, want %q", a.Redis, tc.want)
			}
		})
	}
}
