package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"golang.org/x/mod/modfile"
)

var update = flag.Bool("update", false, "rewrite the golden adapt files")

const examplesDir = "../../caddyfile-examples"

// TestExamplesAdapt adapts every Caddyfile example, compares the JSON with
// its golden file, and validates it (which provisions every module): this is
// also the check that Provision opens no connection, since the DSNs below
// point at nothing.
func TestExamplesAdapt(t *testing.T) {
	t.Setenv("COMFYGATE_POSTGRES_DSN", "postgres://nobody@127.0.0.1:1/none")
	t.Setenv("COMFYGATE_REDIS_URL", "redis://127.0.0.1:1/0")
	t.Setenv("COMFYGATE_BLOB_DIR", t.TempDir())
	t.Setenv("COMFYGATE_S3_ENDPOINT", "https://127.0.0.1:1")
	t.Setenv("COMFYGATE_S3_BUCKET", "comfygate")
	t.Setenv("COMFYGATE_S3_REGION", "us-east-1")
	t.Setenv("COMFYGATE_S3_ACCESS_KEY", "example-access-key")
	t.Setenv("COMFYGATE_S3_SECRET_KEY", "example-secret-key")
	t.Setenv("COMFYGATE_ROUTER_CATALOG", filepath.Join(cwd, examplesDir, "router-catalog.json"))
	t.Setenv("ROUTER_JWT_SECRET", "example-secret-of-at-least-32-bytes!!")
	for _, k := range []string{"FAL_KEY", "BFL_KEY", "OPENAI_KEY", "ELEVENLABS_KEY"} {
		t.Setenv(k, "example-"+k)
	}
	t.Chdir(t.TempDir()) // embedded examples name ./data; keep it out of the tree

	files, err := filepath.Glob(filepath.Join(cwd, examplesDir, "*.Caddyfile"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".Caddyfile")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out, warnings, err := adapter.Adapt(body, map[string]any{"filename": f})
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			for _, w := range warnings {
				t.Errorf("adapt warning: %s:%d: %s", w.File, w.Line, w.Message)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "\t"); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			golden := filepath.Join(cwd, "testdata", name+".json")
			if *update {
				if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("missing golden file (run go test ./cmd/comfygate -run TestExamplesAdapt -update): %v", err)
			}
			if !bytes.Equal(pretty.Bytes(), want) {
				t.Errorf("adapted JSON differs from %s; got:\n%s", golden, pretty.String())
			}
			var cfg caddy.Config
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			if err := caddy.Validate(&cfg); err != nil {
				t.Errorf("validate: %v", err)
			}
		})
	}
}

// cwd is the package directory, captured before any test changes directory.
var cwd, _ = os.Getwd()

// manifest is xcaddy.json, comfygate's own build manifest.
type manifest struct {
	CaddyVersion string `json:"caddy_version"`
	Dependencies []struct {
		Module  string `json:"module"`
		Version string `json:"version"`
	} `json:"dependencies"`
	Modules []string `json:"modules"`
	Build   string   `json:"build"`
}

// TestXcaddyManifest keeps xcaddy.json in step with go.mod and with the
// modules this binary registers.
func TestXcaddyManifest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(cwd, "../../xcaddy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("xcaddy.json: %v", err)
	}
	gomod, err := os.ReadFile(filepath.Join(cwd, "../../go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", gomod, nil)
	if err != nil {
		t.Fatal(err)
	}
	caddyVersion := ""
	for _, r := range mf.Require {
		if r.Mod.Path == "github.com/caddyserver/caddy/v2" {
			caddyVersion = r.Mod.Version
		}
	}
	if caddyVersion == "" || m.CaddyVersion != caddyVersion {
		t.Errorf("xcaddy.json caddy_version %q, go.mod requires %q", m.CaddyVersion, caddyVersion)
	}
	if !strings.Contains(m.Build, m.CaddyVersion) {
		t.Errorf("build line %q does not name caddy %s", m.Build, m.CaddyVersion)
	}
	if len(m.Dependencies) == 0 || m.Dependencies[0].Module != mf.Module.Mod.Path {
		t.Errorf("first dependency must be this module %s", mf.Module.Mod.Path)
	}

	var ours []string
	for _, id := range caddy.Modules() {
		info, err := caddy.GetModule(id)
		if err != nil {
			t.Fatal(err)
		}
		typ := reflect.TypeOf(info.New())
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if strings.HasPrefix(typ.PkgPath(), mf.Module.Mod.Path+"/") {
			ours = append(ours, id)
		}
	}
	slices.Sort(ours)
	listed := slices.Clone(m.Modules)
	slices.Sort(listed)
	if !slices.Equal(ours, listed) {
		t.Errorf("xcaddy.json modules %v, registered %v", listed, ours)
	}
}
