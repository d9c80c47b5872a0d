package comfygate

import (
	"slices"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// creditsCommand is the credits command as the command line builds it.
func creditsCommand(t *testing.T) *cobra.Command {
	t.Helper()
	c, ok := caddycmd.Commands()["credits"]
	if !ok {
		t.Fatal("credits is not registered")
	}
	cmd := &cobra.Command{Use: c.Name}
	c.CobraFunc(cmd)
	cmd.InitDefaultHelpFlag()
	return cmd
}

// TestParseWithNegativeNumbers: a negative amount is an argument wherever
// an argument is expected, and every flag of the command still parses,
// including one whose value is a negative number.
func TestParseWithNegativeNumbers(t *testing.T) {
	cfg := []string{"--config", "x.Caddyfile"}
	tests := []struct {
		name   string
		args   []string
		want   []string
		config string
		note   string
		json   bool
		err    bool
	}{
		{name: "negative amount", args: []string{"grant", "acme", "-3"}, want: []string{"grant", "acme", "-3"}},
		{name: "positive amount", args: []string{"grant", "acme", "3"}, want: []string{"grant", "acme", "3"}},
		{name: "flags around it", args: append(cfg, "grant", "acme", "-3", "--note", "refund 7"),
			want: []string{"grant", "acme", "-3"}, config: "x.Caddyfile", note: "refund 7"},
		{name: "after --", args: append(cfg, "grant", "acme", "--", "-3"),
			want: []string{"grant", "acme", "-3"}, config: "x.Caddyfile"},
		{name: "flag value that is negative", args: []string{"grant", "acme", "-3", "--note", "-40"},
			want: []string{"grant", "acme", "-3"}, note: "-40"},
		{name: "shorthand and = forms", args: []string{"-c", "y.Caddyfile", "grant", "--note=-2", "acme", "-12"},
			want: []string{"grant", "acme", "-12"}, config: "y.Caddyfile", note: "-2"},
		{name: "shorthand with value attached", args: []string{"-cz.Caddyfile", "grant", "acme", "-1"},
			want: []string{"grant", "acme", "-1"}, config: "z.Caddyfile"},
		{name: "boolean then a negative", args: []string{"ledger", "--json", "-5"},
			want: []string{"ledger", "-5"}, json: true},
		{name: "two negatives in a row", args: []string{"grant", "-1", "-2"}, want: []string{"grant", "-1", "-2"}},
		{name: "unknown flag", args: []string{"grant", "acme", "-3", "--bogus"}, err: true},
		{name: "unknown shorthand", args: []string{"grant", "acme", "-x"}, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := creditsCommand(t)
			got, err := parseWithNegativeNumbers(cmd, tc.args)
			if tc.err {
				if err == nil {
					t.Fatalf("parsed %v as %v, want an error", tc.args, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fl := caddycmd.Flags{FlagSet: cmd.Flags()}
			if !slices.Equal(got, tc.want) || fl.String("config") != tc.config || fl.String("note") != tc.note ||
				fl.Bool("json") != tc.json {
				t.Fatalf("%v: args %q config %q note %q json %v", tc.args, got, fl.String("config"), fl.String("note"), fl.Bool("json"))
			}
		})
	}
}
