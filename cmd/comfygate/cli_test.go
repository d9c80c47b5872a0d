package main

import (
	"errors"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// TestRootCommandHasEveryRegisteredCommand: a command registered with
// caddycmd.RegisterCommand (Caddy's, or comfygate's such as api-key) shows
// up under the comfygate root, except the refused ones, which are hidden.
func TestRootCommandHasEveryRegisteredCommand(t *testing.T) {
	root := newRootCommand()
	if root.Name() != "comfygate" {
		t.Errorf("root is %q", root.Name())
	}
	registered := caddycmd.Commands()
	if _, ok := registered["api-key"]; !ok {
		t.Fatal("api-key is not registered; the modules are not linked in")
	}
	for name := range registered {
		sub, _, err := root.Find([]string{name})
		if err != nil || sub == root || sub.Name() != name {
			t.Errorf("%s: not under the root (%v)", name, err)
			continue
		}
		if sub.Hidden != refused[name] {
			t.Errorf("%s: hidden %v, want %v", name, sub.Hidden, refused[name])
		}
	}
	for name := range refused {
		sub, _, _ := root.Find([]string{name})
		if err := sub.RunE(sub, nil); err == nil {
			t.Errorf("%s ran instead of refusing", name)
		}
	}
	if sub, _, err := root.Find([]string{"manpage"}); err != nil || sub.Name() != "manpage" {
		t.Errorf("manpage missing: %v", err)
	}
}

// TestExitCode: the status a Caddy command asks for reaches the process,
// read from caddycmd's own error (a Caddy upgrade that changes that error
// fails here rather than in production).
func TestExitCode(t *testing.T) {
	tests := []struct {
		status int
		want   int
	}{{1, 1}, {2, 2}, {3, 3}}
	for _, tt := range tests {
		runE := caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) {
			return tt.status, errors.New("failed")
		})
		err := runE(&cobra.Command{}, nil)
		if err == nil {
			t.Fatalf("status %d: no error", tt.status)
		}
		if got := exitCode(err); got != tt.want {
			t.Errorf("status %d: exit code %d, want %d", tt.status, got, tt.want)
		}
	}
	if got := exitCode(errors.New("cobra: unknown command")); got != 1 {
		t.Errorf("a plain error exits %d, want 1", got)
	}
}

// TestRootHelpNamesComfygateCommands: the root's description names every
// command that one of comfygate's own packages registers (found by the
// package of the function the command runs), so that a new command cannot
// be left out of it again.
func TestRootHelpNamesComfygateCommands(t *testing.T) {
	root := newRootCommand()
	var own []string
	for name, c := range caddycmd.Commands() {
		fn := any(c.Func)
		if c.CobraFunc != nil {
			fn = c.CobraFunc
		}
		pkg := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
		if strings.HasPrefix(pkg, "github.com/comfygate/comfygate/") {
			own = append(own, name)
		}
	}
	t.Logf("comfygate's own commands: %v", own)
	if len(own) < 3 {
		t.Fatalf("comfygate's own commands: %v; the modules are not linked in", own)
	}
	for _, name := range own {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(root.Long) {
			t.Errorf("the root's description does not name %s:\n%s", name, root.Long)
		}
	}
}
