package comfyauth

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/principal"
	"github.com/comfygate/comfygate/internal/router/jwtauth"
)

// ModeJWT verifies bearer JWTs (the model router's credential).
const ModeJWT = "jwt"

// provisionJWT resolves {env.X} in secrets and builds the verifier.
func (h *Handler) provisionJWT() error {
	if h.JWT == nil {
		return errors.New("comfy_auth: jwt mode needs a jwt configuration")
	}
	repl := caddy.NewReplacer()
	cfg := *h.JWT
	cfg.Keys = append([]jwtauth.KeyConfig(nil), h.JWT.Keys...)
	for i := range cfg.Keys {
		k := &cfg.Keys[i]
		k.Secret = repl.ReplaceKnown(k.Secret, "")
		k.SecretFile = repl.ReplaceKnown(k.SecretFile, "")
		k.PEMFile = repl.ReplaceKnown(k.PEMFile, "")
	}
	cfg.JWKSFile = repl.ReplaceKnown(cfg.JWKSFile, "")
	cfg.Issuer = repl.ReplaceKnown(cfg.Issuer, "")
	cfg.Audience = repl.ReplaceKnown(cfg.Audience, "")
	v, err := jwtauth.New(cfg, nil)
	if err != nil {
		return fmt.Errorf("comfy_auth: jwt: %w", err)
	}
	h.verifier = v
	return nil
}

// authenticateJWT verifies the bearer token: invalid → 401 unauthorized,
// valid but router switched off → 403 not_enabled.
func (h *Handler) authenticateJWT(r *http.Request) (principal.Principal, error) {
	token, ok := bearer(r)
	if !ok {
		return principal.Principal{}, unauthorized(r)
	}
	c, err := h.verifier.Verify(token, time.Now())
	switch {
	case errors.Is(err, jwtauth.ErrNotEnabled):
		return principal.Principal{}, apierr.New(http.StatusForbidden, "not_enabled",
			"the model router is not enabled for this account")
	case err != nil:
		h.logger.Debug("jwt refused") // the reason may echo claims; keep it out of logs
		return principal.Principal{}, unauthorized(r)
	}
	return principal.Principal{
		AccountID: c.Workspace, WorkspaceID: c.Workspace,
		Entitlements: c.Entitlements, RouterEnabled: c.Enabled,
	}, nil
}

// unmarshalJWT parses the jwt block:
//
//	comfy_auth jwt {
//		key <alg> secret <secret> [<kid>]
//		key <alg> secret_file <path> [<kid>]
//		key <alg> pem_file <path> [<kid>]
//		jwks_file <path>
//		issuer <iss>
//		audience <aud>
//		leeway <duration>
//		workspace_claim <name>
//		entitlements_claim <name>
//		enabled_claim <name>
//		require_enabled_claim
//		allow_origin <origin...>
//		min_body_rate <size>|off [<grace>]
//	}
func (h *Handler) unmarshalJWT(d *caddyfile.Dispenser) error {
	h.JWT = &jwtauth.Config{}
	for d.NextBlock(0) {
		opt := d.Val()
		if ok, err := h.unmarshalSiteOption(d, opt); ok || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		args := d.RemainingArgs()
		switch opt {
		case "key":
			if len(args) < 3 || len(args) > 4 {
				return d.Err("key needs <alg> secret|secret_file|pem_file <value> [<kid>]")
			}
			k := jwtauth.KeyConfig{Algorithm: args[0]}
			switch args[1] {
			case "secret":
				k.Secret = args[2]
			case "secret_file":
				k.SecretFile = args[2]
			case "pem_file":
				k.PEMFile = args[2]
			default:
				return d.Errf("unknown key source %q", args[1])
			}
			if len(args) == 4 {
				k.ID = args[3]
			}
			h.JWT.Keys = append(h.JWT.Keys, k)
		case "require_enabled_claim":
			if len(args) != 0 {
				return d.ArgErr()
			}
			h.JWT.RequireEnabledClaim = true
		default:
			if len(args) != 1 {
				return d.ArgErr()
			}
			if err := setJWTOption(h.JWT, opt, args[0]); err != nil {
				return d.Err(err.Error())
			}
		}
	}
	return nil
}

func setJWTOption(c *jwtauth.Config, opt, v string) error {
	switch opt {
	case "jwks_file":
		c.JWKSFile = v
	case "issuer":
		c.Issuer = v
	case "audience":
		c.Audience = v
	case "workspace_claim":
		c.WorkspaceClaim = v
	case "entitlements_claim":
		c.EntitlementsClaim = v
	case "enabled_claim":
		c.EnabledClaim = v
	case "leeway":
		d, err := caddy.ParseDuration(v)
		if err != nil {
			if s, aerr := strconv.Atoi(strings.TrimSpace(v)); aerr == nil {
				d = time.Duration(s) * time.Second
			} else {
				return fmt.Errorf("leeway: %w", err)
			}
		}
		c.Leeway = d
	default:
		return fmt.Errorf("unknown jwt option %q", opt)
	}
	return nil
}
