package comfydeployment

import (
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	h := new(Handler)
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`comfy_deployment {
		domains run.example.com stg.run.example.com
		retry_after 7s
		demo {
			max_queued 3
			max_upload_size 1MiB
			max_streams 2
			submits 5 30s
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := DemoConfig{MaxQueued: 3, MaxUploadBytes: 1 << 20, MaxStreams: 2, Submits: 5, SubmitsWindow: caddy.Duration(30 * time.Second)}
	if len(h.Domains) != 2 || h.RetryAfter != caddy.Duration(7*time.Second) || *h.Demo != want {
		t.Errorf("parsed %+v demo %+v", h, h.Demo)
	}
	for _, bad := range []string{
		"comfy_deployment x",
		"comfy_deployment {\n domains\n}",
		"comfy_deployment {\n retry_after soon\n}",
		"comfy_deployment {\n demo {\n submits 5\n }\n}",
		"comfy_deployment {\n demo {\n max_queued many\n }\n}",
		"comfy_deployment {\n demo {\n max_queued 1 2\n }\n}",
		"comfy_deployment {\n demo {\n burst 1\n }\n}",
		"comfy_deployment {\n ttl 1s\n}",
	} {
		if err := new(Handler).UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
