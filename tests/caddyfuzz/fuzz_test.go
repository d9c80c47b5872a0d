package caddyfuzz_test

// One fuzz target per module's UnmarshalCaddyfile, all in this package so
// that tests/fuzz builds one instrumented binary for the twelve (each
// module package would link a Caddy of its own: minutes on a cold cache).

import (
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/comfygate/comfygate/modules/comfyassets"
	"github.com/comfygate/comfygate/modules/comfyauth"
	"github.com/comfygate/comfygate/modules/comfyconsole"
	"github.com/comfygate/comfygate/modules/comfydeployment"
	"github.com/comfygate/comfygate/modules/comfygate"
	"github.com/comfygate/comfygate/modules/comfyhealth"
	"github.com/comfygate/comfygate/modules/comfyjobs"
	"github.com/comfygate/comfygate/modules/comfynative"
	"github.com/comfygate/comfygate/modules/deploymenttls"
	"github.com/comfygate/comfygate/modules/errorenvelope"
	"github.com/comfygate/comfygate/modules/idempotency"
	"github.com/comfygate/comfygate/modules/modelrouter"
	"github.com/comfygate/comfygate/tests/caddyfuzz"
)

func FuzzComfyAssets(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfy_assets", func() caddyfile.Unmarshaler { return new(comfyassets.Handler) })
}

func FuzzComfyAuth(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfy_auth", func() caddyfile.Unmarshaler { return new(comfyauth.Handler) })
}

func FuzzComfyConsole(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfy_console", func() caddyfile.Unmarshaler { return new(comfyconsole.Handler) })
}

func FuzzComfyDeployment(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfy_deployment", func() caddyfile.Unmarshaler { return new(comfydeployment.Handler) })
}

func FuzzComfygateApp(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfygate", func() caddyfile.Unmarshaler { return new(comfygate.App) })
}

func FuzzComfyHealth(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfy_health", func() caddyfile.Unmarshaler { return new(comfyhealth.Handler) })
}

func FuzzComfyJobs(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfy_jobs", func() caddyfile.Unmarshaler { return new(comfyjobs.Handler) })
}

func FuzzComfyNative(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfy_native", func() caddyfile.Unmarshaler { return new(comfynative.Handler) })
}

func FuzzDeploymentTLS(f *testing.F) {
	caddyfuzz.Fuzz(f, "comfy_deployment", func() caddyfile.Unmarshaler { return new(deploymenttls.Permission) })
}

func FuzzErrorEnvelope(f *testing.F) {
	caddyfuzz.Fuzz(f, "error_envelope", func() caddyfile.Unmarshaler { return new(errorenvelope.Handler) })
}

func FuzzIdempotency(f *testing.F) {
	caddyfuzz.Fuzz(f, "idempotency", func() caddyfile.Unmarshaler { return new(idempotency.Handler) })
}

func FuzzModelRouter(f *testing.F) {
	caddyfuzz.Fuzz(f, "model_router", func() caddyfile.Unmarshaler { return new(modelrouter.Handler) })
}
