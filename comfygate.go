// Package comfygate plugs every comfygate Caddy module into a Caddy build:
// `xcaddy build --with github.com/comfygate/comfygate` imports it, and so
// does cmd/comfygate, the custom build with comfygate's own command line.
package comfygate

import _ "github.com/comfygate/comfygate/modules"
