// Command comfygate is Caddy with the standard modules and comfygate's own
// (the same modules as `xcaddy build --with github.com/comfygate/comfygate`)
// and a command line that names itself comfygate (cli.go).
package main

import (
	"os"

	_ "time/tzdata"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/comfygate/comfygate"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(exitCode(err))
	}
}
