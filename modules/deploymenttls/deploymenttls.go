// Package deploymenttls is the tls.permission.comfy_deployment module:
// Caddy's on-demand TLS asks it whether to obtain (or load) a certificate
// for a server name, and it allows exactly <id>.<base domain> for a
// deployment that exists and is not stopped. One on_demand TLS site then
// serves every customer host without a wildcard certificate or an external
// "ask" service, and a stranger cannot make the gateway request
// certificates for names it made up.
package deploymenttls

import (
	"context"
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"

	"github.com/comfygate/comfygate/internal/deployments"
	"github.com/comfygate/comfygate/modules/comfygate"
	"github.com/comfygate/comfygate/storage"
)

func init() {
	caddy.RegisterModule(Permission{})
}

// Permission allows certificates for the hosts of live deployments.
type Permission struct {
	// Domains are the base domains deployments are served under (the same
	// as comfy_deployment's): a certificate is allowed only for a name
	// that is one label under one of them.
	Domains []string `json:"domains,omitempty"`

	app     *comfygate.App
	domains deployments.Domains
}

// CaddyModule returns the Caddy module information.
func (Permission) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "tls.permission.comfy_deployment",
		New: func() caddy.Module { return new(Permission) },
	}
}

// Provision reaches the comfygate app; it opens no connection.
func (p *Permission) Provision(ctx caddy.Context) error {
	app, err := ctx.App("comfygate")
	if err != nil {
		return fmt.Errorf("tls.permission.comfy_deployment: %w", err)
	}
	p.app = app.(*comfygate.App)
	p.domains = deployments.NewDomains(p.Domains)
	return nil
}

// Validate requires at least one base domain.
func (p *Permission) Validate() error {
	if len(p.domains) == 0 {
		return errors.New("tls.permission.comfy_deployment: needs at least one base domain")
	}
	return nil
}

// CertificateAllowed allows name when it is <id>.<base domain> for an
// existing deployment that is not stopped. A storage failure is returned
// as it is (not as a denial), so that it is logged as one.
func (p *Permission) CertificateAllowed(ctx context.Context, name string) error {
	id, ok := p.domains.IDFromHost(name)
	if !ok || !storage.ValidDeploymentID(id) {
		return fmt.Errorf("%w: %q is not a deployment host", caddytls.ErrPermissionDenied, name)
	}
	if err := p.app.Ready(); err != nil {
		return err
	}
	d, err := p.app.Store().GetDeployment(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("%w: no deployment %q", caddytls.ErrPermissionDenied, id)
	}
	if err != nil {
		return fmt.Errorf("looking up deployment %q: %w", id, err)
	}
	if d.State == storage.DeploymentStopped {
		return fmt.Errorf("%w: deployment %q is stopped", caddytls.ErrPermissionDenied, id)
	}
	return nil
}

// Interface guards
var (
	_ caddytls.OnDemandPermission = (*Permission)(nil)
	_ caddy.Provisioner           = (*Permission)(nil)
	_ caddy.Validator             = (*Permission)(nil)
	_ caddyfile.Unmarshaler       = (*Permission)(nil)
)
