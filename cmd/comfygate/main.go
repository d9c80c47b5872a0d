// Command comfygate is Caddy with the standard modules and comfygate's own,
// exactly what `xcaddy build --with github.com/comfygate/comfygate` would produce.
package main

import (
	_ "time/tzdata"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/comfygate/comfygate/modules"
)

func main() {
	caddycmd.Main()
}
