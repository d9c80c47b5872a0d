package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"
	"strings"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/comfygate/comfygate/internal/version"
)

// refused are Caddy's commands that download a stock Caddy build from
// Caddy's build server and put it in place of this binary; that build would
// have none of comfygate's modules (they are not on that server), so here
// they refuse instead.
var refused = map[string]bool{"upgrade": true, "add-package": true, "remove-package": true}

const refusal = `%s is not available in comfygate: it would replace this binary with a stock
Caddy build from Caddy's download server, which has none of comfygate's
modules. Build a new comfygate instead: go build ./cmd/comfygate in a
checkout, or xcaddy (docs/install.md)`

// newRootCommand is comfygate's command line: every command registered with
// caddycmd.RegisterCommand — Caddy's own and comfygate's (a package adds its
// command from init, as modules/comfygate does for api-key, credits and
// deployment) — under a root
// named comfygate, with version and build-info reporting comfygate's build
// and the refused commands hidden and refusing. Caddy's own root command is
// not used because nothing outside Caddy's cmd package can change it.
func newRootCommand() *cobra.Command {
	info := version.Read()
	root := &cobra.Command{
		Use:   "comfygate",
		Short: "comfygate: the Comfy API v2 and model router gateway, built on Caddy",
		Long: `comfygate is a Caddy build with the standard modules and comfygate's own: the
Comfy API v2 (assets and jobs) and the model router. It runs and is managed
like Caddy — run, reload, validate, adapt, fmt, list-modules — and adds
comfygate's own commands: api-key, credits and deployment manage the API
keys, credit ledger and serverless deployments in the storage a config
names, and need what run needs with that config: the same working
directory and environment (COMFYGATE_POSTGRES_DSN, … in the examples).
Configuration is a Caddyfile or Caddy JSON; docs/configuration.md lists every
comfygate directive, and caddyfile-examples/ holds examples to start from.`,
		Example: `  $ comfygate run --config caddyfile-examples/self-hosted.Caddyfile
  $ comfygate reload --config /etc/comfygate/Caddyfile
  $ comfygate api-key --config /etc/comfygate/Caddyfile create --account acme
  $ comfygate credits --config /etc/comfygate/Caddyfile grant acme 100
  $ comfygate list-modules --skip-standard --versions`,
		// A config that fails to provision should not print every flag.
		SilenceUsage: true,
		Version:      info.String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetHelpTemplate(root.HelpTemplate() + `
comfygate's commands behave as Caddy's: https://caddyserver.com/docs/command-line
`)
	own := map[string]caddycmd.Command{
		"version":    versionCommand(info),
		"build-info": buildInfoCommand(info),
	}
	for name, c := range caddycmd.Commands() {
		switch {
		case refused[name]:
			root.AddCommand(refusedCommand(name))
		case own[name].Name != "":
			root.AddCommand(toCobra(own[name]))
		default:
			root.AddCommand(toCobra(c))
		}
	}
	root.AddCommand(manpageCommand(root))
	return root
}

// toCobra turns a registered command into a cobra command the way Caddy's
// own root does.
func toCobra(c caddycmd.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   strings.TrimSpace(c.Name + " " + c.Usage),
		Short: c.Short,
		Long:  c.Long,
	}
	if c.CobraFunc != nil {
		c.CobraFunc(cmd)
		return cmd
	}
	cmd.RunE = caddycmd.WrapCommandFuncForCobra(c.Func)
	if c.Flags != nil {
		cmd.Flags().AddGoFlagSet(c.Flags)
	}
	return cmd
}

func versionCommand(info version.Info) caddycmd.Command {
	return caddycmd.Command{
		Name:  "version",
		Short: "Prints comfygate's version, commit and Caddy version",
		Long: `
Prints one line: comfygate's module version, the commit it was built from
and the Caddy version it is built on, as the Go toolchain recorded them.
A build in a git checkout records the commit when VCS stamping is on
(go build -buildvcs=true); a plugin build records comfygate's module
version, whose pseudo-version names the commit.
`,
		Func: func(caddycmd.Flags) (int, error) {
			fmt.Println(info.String())
			return caddy.ExitCodeSuccess, nil
		},
	}
}

func buildInfoCommand(info version.Info) caddycmd.Command {
	return caddycmd.Command{
		Name:  "build-info",
		Short: "Prints comfygate's version and the Go build information",
		Func: func(caddycmd.Flags) (int, error) {
			bi, ok := debug.ReadBuildInfo()
			if !ok {
				return caddy.ExitCodeFailedStartup, errors.New("no build information")
			}
			fmt.Println(info.String())
			fmt.Println(bi)
			return caddy.ExitCodeSuccess, nil
		},
	}
}

func refusedCommand(name string) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Short:              "Not available in comfygate",
		Hidden:             true,
		DisableFlagParsing: true, // refuse whatever flags Caddy's command took
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf(refusal, name)
		},
	}
}

func manpageCommand(root *cobra.Command) *cobra.Command {
	return toCobra(caddycmd.Command{
		Name:  "manpage",
		Usage: "--directory <path>",
		Short: "Generates the manual pages for comfygate's commands",
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("directory", "o", "", "The output directory where the manpages are generated")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(func(fl caddycmd.Flags) (int, error) {
				dir := strings.TrimSpace(fl.String("directory"))
				if dir == "" {
					return caddy.ExitCodeFailedQuit, errors.New("--directory is required")
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return caddy.ExitCodeFailedQuit, err
				}
				header := &doc.GenManHeader{Title: "comfygate", Section: "8"}
				if err := doc.GenManTree(root, header, dir); err != nil {
					return caddy.ExitCodeFailedQuit, err
				}
				return caddy.ExitCodeSuccess, nil
			})
		},
	})
}

// exitCode is the process status for an error from a command.
// caddycmd.WrapCommandFuncForCobra carries a status above 1 in an error of
// an unexported type with an exported ExitCode field (caddycmd.Main reads
// it by type); read the field by name. Every other error exits 1.
func exitCode(err error) int {
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		if f := v.Elem().FieldByName("ExitCode"); f.IsValid() && f.CanInt() {
			return int(f.Int())
		}
	}
	return 1
}
