// Package modules registers every comfygate Caddy module. Import it for its
// side effects, as cmd/comfygate does.
package modules

import (
	_ "github.com/comfygate/comfygate/modules/comfyassets"
	_ "github.com/comfygate/comfygate/modules/comfyauth"
	_ "github.com/comfygate/comfygate/modules/comfyconsole"
	_ "github.com/comfygate/comfygate/modules/comfydeployment"
	_ "github.com/comfygate/comfygate/modules/comfygate"
	_ "github.com/comfygate/comfygate/modules/comfyhealth"
	_ "github.com/comfygate/comfygate/modules/comfyjobs"
	_ "github.com/comfygate/comfygate/modules/comfynative"
	_ "github.com/comfygate/comfygate/modules/comfyworkers"
	_ "github.com/comfygate/comfygate/modules/deploymenttls"
	_ "github.com/comfygate/comfygate/modules/errorenvelope"
	_ "github.com/comfygate/comfygate/modules/idempotency"
	_ "github.com/comfygate/comfygate/modules/modelrouter"
)
