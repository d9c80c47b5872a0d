package comfygate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apikey"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "api-key",
		Usage: "--config <path> [--adapter <name>] create --account <id> [--name <label>] | revoke <key-id> | list [--account <id>]",
		Short: "Creates, revokes and lists comfygate API keys",
		Long: `
Manages the account API keys that comfy_auth api_keys accepts, in the storage
named by the comfygate global option of the given config.

  create   mints a key for --account and prints it once; only its SHA-256
           digest is stored
  revoke   revokes a key by its id (the part after cgk_ and before _)
  list     lists key ids, accounts and states (never secrets)
` + storageHelp,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("config", "c", "", "Configuration file naming the storage")
			cmd.Flags().StringP("adapter", "a", "", "Name of config adapter to apply")
			cmd.Flags().String("account", "", "Account id")
			cmd.Flags().String("name", "", "A label for the key")
			cmd.Args = cobra.RangeArgs(1, 2)
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdAPIKey)
		},
	})
}

func cmdAPIKey(fl caddycmd.Flags) (int, error) {
	_, res, err := openFromFlags(fl)
	if err != nil {
		return fail(err)
	}
	defer res.closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()

	switch fl.Arg(0) {
	case "create":
		k, token, err := apikey.Create(ctx, res.store, fl.String("account"), fl.String("name"))
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(os.Stderr, "created key %s for account %s; the token is shown only now:\n", k.ID, k.AccountID)
		fmt.Println(token)
	case "revoke":
		if fl.Arg(1) == "" {
			return fail(errors.New("revoke needs a key id"))
		}
		if err := res.store.RevokeAPIKey(ctx, fl.Arg(1)); err != nil {
			return fail(err)
		}
		fmt.Fprintf(os.Stderr, "revoked key %s\n", fl.Arg(1))
	case "list":
		keys, err := res.store.ListAPIKeys(ctx, fl.String("account"))
		if err != nil {
			return fail(err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tACCOUNT\tNAME\tCREATED\tSTATE")
		for _, k := range keys {
			state := "active"
			if k.RevokedAt != nil {
				state = "revoked " + k.RevokedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.AccountID, k.Name, k.CreatedAt.UTC().Format(time.RFC3339), state)
		}
		tw.Flush()
	default:
		return fail(fmt.Errorf("unknown api-key action %q (want create, revoke or list)", fl.Arg(0)))
	}
	return 0, nil
}

func fail(err error) (int, error) { return 1, err }

// storageHelp ends the help of every command that opens the storage of a
// config: it opens it as the gateway does, so it needs what run needs.
const storageHelp = `
It opens the storage, Redis and blobs the config names, as run does: give it
the config the gateway runs, from the same working directory (a relative
embedded storage path is relative to it) and with the same environment (the
cloud, credits and serverless examples read COMFYGATE_POSTGRES_DSN,
COMFYGATE_REDIS_URL, COMFYGATE_BLOB_DIR or COMFYGATE_S3_*; an {env.X} that
is not set is empty). The gateway need not be running.
`

// openFromFlags loads the config named by --config/--adapter and opens
// (and migrates) the backends its comfygate app names; the caller closes
// them with closeAll.
func openFromFlags(fl caddycmd.Flags) (*App, *resources, error) {
	app, err := appFromConfig(fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, nil, err
	}
	res := newResources(app.resourceConfig(), zap.NewNop())
	if err := res.open(); err != nil {
		return nil, nil, err
	}
	return app, res, nil
}

// appFromConfig loads a config and returns its comfygate app with defaults
// applied, without provisioning anything.
func appFromConfig(configFile, adapter string) (*App, error) {
	if configFile == "" {
		return nil, errors.New("--config is required")
	}
	cfgJSON, _, _, err := caddycmd.LoadConfig(configFile, adapter)
	if err != nil {
		return nil, err
	}
	var cfg struct {
		Apps map[string]json.RawMessage `json:"apps"`
	}
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		return nil, err
	}
	app := new(App)
	if raw, ok := cfg.Apps["comfygate"]; ok {
		if err := json.Unmarshal(raw, app); err != nil {
			return nil, err
		}
	}
	app.applyDefaults()
	if err := app.Validate(); err != nil {
		return nil, err
	}
	return app, nil
}
