package comfyauth

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/comfygate/comfygate/internal/httpx"
)

// TestMinBodyRate: min_body_rate in the modes (api_keys parses its block
// as static_token does but needs the app to provision), and the bound every site
// gets without it (1 KiB/s, 30 s grace); off turns it off.
func TestMinBodyRate(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	tests := []struct {
		input string
		want  httpx.BodyRate // after Provision
		ok    bool
	}{
		{"comfy_auth none", httpx.BodyRate{Rate: 1024, Grace: 30 * time.Second}, true},
		{"comfy_auth none {\n min_body_rate 10KiB\n}", httpx.BodyRate{Rate: 10 << 10, Grace: 30 * time.Second}, true},
		{"comfy_auth static_token t {\n min_body_rate 512 5s\n}", httpx.BodyRate{Rate: 512, Grace: 5 * time.Second}, true},
		{"comfy_auth static_token abc {\n min_body_rate off\n}", httpx.BodyRate{Rate: -1, Grace: 30 * time.Second}, true},
		{"comfy_auth jwt {\n key HS256 secret 0123456789abcdef0123456789abcdef\n min_body_rate 2KB 1m\n}", httpx.BodyRate{Rate: 2000, Grace: time.Minute}, true},
		{"comfy_auth none {\n min_body_rate\n}", httpx.BodyRate{}, false},
		{"comfy_auth none {\n min_body_rate 0\n}", httpx.BodyRate{}, false},
		{"comfy_auth none {\n min_body_rate fast\n}", httpx.BodyRate{}, false},
		{"comfy_auth none {\n min_body_rate 1KiB -1s\n}", httpx.BodyRate{}, false},
		{"comfy_auth none {\n min_body_rate off 5s\n}", httpx.BodyRate{}, false},
		{"comfy_auth none {\n min_body_rate 1KiB 5s 6s\n}", httpx.BodyRate{}, false},
	}
	for _, tc := range tests {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok %v", tc.input, err, tc.ok)
			continue
		}
		if err != nil {
			continue
		}
		if err := h.Provision(ctx); err != nil {
			t.Fatalf("%q: %v", tc.input, err)
		}
		if h.bodyRate != tc.want {
			t.Errorf("%q: bound %+v, want %+v", tc.input, h.bodyRate, tc.want)
		}
	}
}
