package comfygate

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The placeholders comfygate's handlers set on a request, for Caddy's
// log_append and header directives (see docs/observability.md):
// {comfygate.account}, {comfygate.job_id} and {comfygate.deployment}.
// Each is also a request variable of the same name.
const (
	PlaceholderAccount    = "comfygate.account"
	PlaceholderJobID      = "comfygate.job_id"
	PlaceholderDeployment = "comfygate.deployment"
)

// SetPlaceholder sets name to value on r's replacer and in its variables.
// It is a no-op outside a Caddy request.
func SetPlaceholder(r *http.Request, name, value string) {
	caddyhttp.SetVar(r.Context(), name, value)
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set(name, value)
	}
}
