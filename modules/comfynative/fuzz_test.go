package comfynative

import (
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/comfygate/comfygate/tests/caddyfuzz"
)

// FuzzUnmarshalCaddyfile: no Caddyfile text panics the parser, and what it
// accepts survives Caddy's JSON round trip.
func FuzzUnmarshalCaddyfile(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfy_native", func() caddyfile.Unmarshaler { return new(Handler) })
}
