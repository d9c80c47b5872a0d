package comfygate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/storage"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name: "deployment",
		Usage: "--config <path> [--adapter <name>] [--json] create <id> --account <id> [--pool <name>] [--public] | " +
			"state <id> <provisioning|starting|ready|stopped> | list [--account <id>] | show <id> | delete <id>",
		Short: "Creates, changes, lists and deletes serverless deployments",
		Long: `
Manages the serverless deployments that comfy_deployment serves, in the
storage named by the comfygate global option of the given config.

  create   records deployment <id> (a DNS label: 1-63 lower-case letters,
           digits and '-', not starting or ending with '-') for --account,
           running its jobs on --pool (default: the config's default pool);
           --public makes it the public demo, which takes callers with no
           credential. It starts in provisioning.
  state    moves it to provisioning, starting, ready or stopped. stopped is
           final: its queued and running jobs are canceled, and it answers
           deployment_stopped from then on.
  list     lists deployments (of --account, or all)
  show     prints one deployment
  delete   stops the deployment (canceling its jobs) and removes its record;
           its jobs and assets stay until their retention

Every change is durable before the command returns. --json prints JSON.
` + storageHelp,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("config", "c", "", "Configuration file naming the storage")
			cmd.Flags().StringP("adapter", "a", "", "Name of config adapter to apply")
			cmd.Flags().String("account", "", "Owner account id")
			cmd.Flags().String("pool", "", "Pool the deployment's jobs run on")
			cmd.Flags().Bool("public", false, "Make it the public demo (no credential needed)")
			cmd.Flags().Bool("json", false, "Print JSON")
			cmd.Args = cobra.RangeArgs(1, 3)
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdDeployment)
		},
	})
}

func cmdDeployment(fl caddycmd.Flags) (int, error) {
	action, id, arg := fl.Arg(0), fl.Arg(1), fl.Arg(2)
	if err := checkDeploymentArgs(action, id, arg); err != nil {
		return fail(err)
	}
	if action == "create" && fl.String("account") == "" {
		return fail(errors.New("create needs --account"))
	}
	app, res, err := openFromFlags(fl)
	if err != nil {
		return fail(err)
	}
	defer res.closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	out := deploymentOutput{w: os.Stdout, json: fl.Bool("json")}
	st := res.store

	switch action {
	case "create":
		pool := fl.String("pool")
		if pool == "" {
			pool = app.DefaultPool()
		}
		if !app.configuresPool(pool) {
			return fail(fmt.Errorf("pool %q is not configured in %s", pool, fl.String("config")))
		}
		d, err := st.CreateDeployment(ctx, storage.Deployment{ID: id, AccountID: fl.String("account"), Pool: pool,
			Public: fl.Bool("public"), State: storage.DeploymentProvisioning})
		if errors.Is(err, storage.ErrDuplicate) {
			return fail(fmt.Errorf("deployment %q already exists", id))
		}
		if err != nil {
			return fail(err)
		}
		return 0, out.one(d)
	case "state":
		d, err := setDeploymentState(ctx, res, id, arg)
		if err != nil {
			return fail(err)
		}
		return 0, out.one(d)
	case "show":
		d, err := st.GetDeployment(ctx, id)
		if err != nil {
			return fail(notFoundAs(err, id))
		}
		return 0, out.one(d)
	case "list":
		ds, err := st.ListDeployments(ctx, fl.String("account"))
		if err != nil {
			return fail(err)
		}
		return 0, out.list(ds)
	case "delete":
		if _, err := setDeploymentState(ctx, res, id, storage.DeploymentStopped); err != nil {
			return fail(err)
		}
		if err := st.DeleteDeployment(ctx, id); err != nil {
			return fail(notFoundAs(err, id))
		}
		fmt.Fprintf(os.Stderr, "deleted deployment %s\n", id)
	}
	return 0, nil
}

// checkDeploymentArgs refuses a malformed command before anything is opened.
func checkDeploymentArgs(action, id, arg string) error {
	switch action {
	case "list":
		if id != "" {
			return errors.New("list takes no arguments")
		}
		return nil
	case "create", "show", "delete", "state":
	default:
		return fmt.Errorf("unknown deployment action %q (want create, state, list, show or delete)", action)
	}
	if !storage.ValidDeploymentID(id) {
		return fmt.Errorf("deployment id %q is not a DNS label: 1-63 lower-case letters, digits and '-', "+
			"not starting or ending with '-'", id)
	}
	if action == "state" {
		if !storage.ValidDeploymentState(arg) {
			return fmt.Errorf("state %q is not one of provisioning, starting, ready, stopped", arg)
		}
	} else if arg != "" {
		return fmt.Errorf("%s takes one argument, the deployment id", action)
	}
	return nil
}

// setDeploymentState records the new state and, for stopped, cancels the
// deployment's queued and running jobs. Stopping again repeats the cancel,
// so a job that slipped in while a stop was being recorded is caught.
func setDeploymentState(ctx context.Context, res *resources, id, state string) (storage.Deployment, error) {
	d, err := res.store.SetDeploymentState(ctx, id, state)
	if errors.Is(err, storage.ErrDeploymentStopped) {
		return storage.Deployment{}, fmt.Errorf("deployment %q is stopped; delete and re-create it instead", id)
	}
	if err != nil {
		return storage.Deployment{}, notFoundAs(err, id)
	}
	if state == storage.DeploymentStopped {
		svc := &jobs.Service{Store: res.store, Bus: res.bus, ExtraData: res.extraData}
		changed, err := svc.CancelDeployment(ctx, id)
		if err != nil {
			return storage.Deployment{}, fmt.Errorf("deployment %s is stopped, but canceling its jobs failed "+
				"(run the command again): %w", id, err)
		}
		fmt.Fprintf(os.Stderr, "canceled %d queued or running jobs of %s\n", len(changed), id)
	}
	return d, nil
}

func notFoundAs(err error, id string) error {
	if errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("no deployment %q", id)
	}
	return err
}

// configuresPool reports whether name is one of the config's pools.
func (a *App) configuresPool(name string) bool {
	for _, p := range a.poolsWithDefaults() {
		if p.Name == name {
			return true
		}
	}
	return false
}

// deploymentJSON is the --json form of a deployment.
type deploymentJSON struct {
	ID        string `json:"id"`
	Account   string `json:"account"`
	Pool      string `json:"pool"`
	Public    bool   `json:"public"`
	State     string `json:"state"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

func toJSON(d storage.Deployment) deploymentJSON {
	return deploymentJSON{ID: d.ID, Account: d.AccountID, Pool: d.Pool, Public: d.Public, State: d.State,
		CreatedAt: d.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: d.UpdatedAt.UTC().Format(time.RFC3339Nano)}
}

type deploymentOutput struct {
	w    io.Writer
	json bool
}

func (o deploymentOutput) one(d storage.Deployment) error {
	if o.json {
		return json.NewEncoder(o.w).Encode(toJSON(d))
	}
	return o.table([]storage.Deployment{d})
}

func (o deploymentOutput) list(ds []storage.Deployment) error {
	if o.json {
		out := make([]deploymentJSON, 0, len(ds))
		for _, d := range ds {
			out = append(out, toJSON(d))
		}
		return json.NewEncoder(o.w).Encode(out)
	}
	return o.table(ds)
}

func (o deploymentOutput) table(ds []storage.Deployment) error {
	tw := tabwriter.NewWriter(o.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tACCOUNT\tPOOL\tPUBLIC\tSTATE\tUPDATED")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\n", d.ID, d.AccountID, d.Pool, d.Public, d.State,
			d.UpdatedAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}
