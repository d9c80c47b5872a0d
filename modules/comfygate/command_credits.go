package comfygate

import (
	"context"
	"fmt"
	"os"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/comfygate/comfygate/internal/credits"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name: "credits",
		Usage: "--config <path> [--adapter <name>] grant <account> <amount> [--note <text>] | balance <account> | " +
			"ledger <account> [--since <t>] [--json] | usage [--since <t>] [--csv]",
		Short: "Grants, inspects and exports account credits",
		Long: `
Manages the credit ledger (one balance per account, shared by jobs and the
model router) in the storage named by the comfygate global option of the
given config.

  grant    adds <amount> whole credits to <account> and prints the new
           balance; a negative amount (grant acme -3) removes them, and
           one larger than the balance is refused, naming the balance
  balance  prints the account's balance
  ledger   lists the account's entries (grant, reservation, settlement,
           refund) with the balance after each; --json prints JSON lines
  usage    per account: jobs ended, their execution seconds, router calls
           finished, credits charged; --csv prints CSV with a header

--since takes an RFC 3339 time, a date (2006-01-02) or a duration ago (24h).
` + storageHelp,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("config", "c", "", "Configuration file naming the storage")
			cmd.Flags().StringP("adapter", "a", "", "Name of config adapter to apply")
			cmd.Flags().String("note", "", "A note recorded with a grant")
			cmd.Flags().String("since", "", "Only entries or usage since this time")
			cmd.Flags().Bool("json", false, "ledger: JSON lines")
			cmd.Flags().Bool("csv", false, "usage: CSV")
			// "grant acme -3": the amount is an argument, not flags; the
			// command parses its own flags (parseWithNegativeNumbers).
			cmd.DisableFlagParsing = true
			cmd.RunE = func(cmd *cobra.Command, args []string) error {
				args, err := parseWithNegativeNumbers(cmd, args)
				if err != nil {
					return err
				}
				if help, _ := cmd.Flags().GetBool("help"); help {
					return cmd.Help()
				}
				if err := cobra.RangeArgs(1, 3)(cmd, args); err != nil {
					return err
				}
				return caddycmd.WrapCommandFuncForCobra(func(fl caddycmd.Flags) (int, error) {
					return cmdCredits(fl, args)
				})(cmd, args)
			}
		},
	})
}

// cmdCredits runs a credits action; args are the command's arguments (the
// action first), parsed by parseWithNegativeNumbers.
func cmdCredits(fl caddycmd.Flags, args []string) (int, error) {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	action, account := arg(0), arg(1)
	wantArgs := map[string]int{"grant": 3, "balance": 2, "ledger": 2, "usage": 1}[action]
	if wantArgs == 0 {
		return fail(fmt.Errorf("unknown credits action %q (want grant, balance, ledger or usage)", action))
	}
	if len(args) != wantArgs {
		return fail(fmt.Errorf("credits %s takes %d argument(s)", action, wantArgs-1))
	}
	since, err := credits.ParseSince(fl.String("since"), time.Now())
	if err != nil {
		return fail(err)
	}
	var amount int64
	if action == "grant" {
		if amount, err = credits.ParseAmount(arg(2)); err != nil {
			return fail(err)
		}
	}
	_, res, err := openFromFlags(fl)
	if err != nil {
		return fail(err)
	}
	defer res.closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	st := res.store

	switch action {
	case "grant":
		if _, err := st.GrantCredits(ctx, account, amount, fl.String("note")); err != nil {
			return fail(fmt.Errorf("grant %d to %s: %w", amount, account, err))
		}
		bal, err := st.CreditBalance(ctx, account)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(os.Stderr, "granted %d credits to %s\n", amount, account)
		fmt.Println(bal)
	case "balance":
		bal, err := st.CreditBalance(ctx, account)
		if err != nil {
			return fail(err)
		}
		fmt.Println(bal)
	case "ledger":
		entries, err := st.CreditLedger(ctx, account, since)
		if err != nil {
			return fail(err)
		}
		bal, err := st.CreditBalance(ctx, account)
		if err != nil {
			return fail(err)
		}
		opening := bal
		for _, e := range entries {
			opening -= e.Amount
		}
		if err := credits.WriteLedger(os.Stdout, entries, opening, fl.Bool("json")); err != nil {
			return fail(err)
		}
	case "usage":
		usage, err := st.CreditUsage(ctx, since)
		if err != nil {
			return fail(err)
		}
		if err := credits.WriteUsage(os.Stdout, usage, fl.Bool("csv")); err != nil {
			return fail(err)
		}
	}
	return 0, nil
}
