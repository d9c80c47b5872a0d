package packaging

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestSystemdUnit checks deploy/comfygate.service: the settings this
// project relies on (its own user and state directory, Caddy's hardening,
// the descriptor limit for event streams), command lines the binary
// accepts, and systemd's own verdict (systemd-analyze verify, in a scratch
// root holding the binary at the unit's path and the user from
// deploy/comfygate.sysusers).
func TestSystemdUnit(t *testing.T) {
	root := gateway.RepoRoot(t)
	unitPath := filepath.Join(root, "deploy", "comfygate.service")
	unit := parseUnit(t, unitPath)

	want := map[string]string{
		"Unit.Requires":            "network-online.target",
		"Service.Type":             "notify", // Caddy tells systemd when it is ready
		"Service.User":             "comfygate",
		"Service.Group":            "comfygate",
		"Service.StateDirectory":   "comfygate",
		"Service.WorkingDirectory": "/var/lib/comfygate",
		// Caddy's own unit's settings.
		"Service.LimitNOFILE":         "1048576",
		"Service.PrivateTmp":          "true",
		"Service.ProtectSystem":       "full",
		"Service.AmbientCapabilities": "CAP_NET_ADMIN CAP_NET_BIND_SERVICE",
		"Install.WantedBy":            "multi-user.target",
	}
	for key, v := range want {
		if got := unit[key]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", key, got, v)
		}
	}
	if len(unit["Service.TimeoutStopSec"]) != 1 {
		t.Error("no TimeoutStopSec")
	}

	// The command lines are ones the binary accepts (an unknown flag fails
	// before --help is honoured), and none logs the environment's secrets.
	bin := gateway.Binary(t)
	for _, key := range []string{"Service.ExecStart", "Service.ExecReload"} {
		if len(unit[key]) != 1 {
			t.Fatalf("%s = %q, want one command", key, unit[key])
		}
		args := strings.Fields(unit[key][0])
		if args[0] != "/usr/bin/comfygate" || !strings.Contains(unit[key][0], "--config /etc/comfygate/Caddyfile") {
			t.Errorf("%s = %q: want /usr/bin/comfygate with --config /etc/comfygate/Caddyfile", key, unit[key][0])
		}
		if strings.Contains(unit[key][0], "--environ") {
			t.Errorf("%s prints the environment, secrets included", key)
		}
		if out, err := exec.Command(bin, append(args[1:], "--help")...).CombinedOutput(); err != nil {
			t.Errorf("%s: comfygate refuses %v: %v\n%s", key, args[1:], err, out)
		}
	}

	// The sysusers entry gives the user the state directory as its home,
	// where Caddy keeps its certificates.
	sysusers, err := os.ReadFile(filepath.Join(root, "deploy", "comfygate.sysusers"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sysusers), "\nu comfygate - ") || !strings.Contains(string(sysusers), " /var/lib/comfygate ") {
		t.Errorf("comfygate.sysusers does not create user comfygate with home /var/lib/comfygate:\n%s", sysusers)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed; only the checks above ran")
		return
	}
	scratch := scratchRoot(t, root, bin)
	// verify reports problems it tolerates (an unknown key, a bad value) on
	// stderr with status 0, so any output is a failure.
	out, err := exec.Command(analyze, "verify", "--root="+scratch, "comfygate.service").CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	if out, err := exec.Command(analyze, "security", "--offline=true", "--root="+scratch, "comfygate.service").CombinedOutput(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Log(lines[len(lines)-1]) // the exposure score, for the record
	}
}

// scratchRoot is a file-system root for systemd-analyze: the host's own
// units, the unit under test, the binary at the unit's ExecStart path and
// the comfygate user from the sysusers file.
func scratchRoot(t *testing.T, repo, bin string) string {
	t.Helper()
	dir := t.TempDir()
	copyFile(t, bin, filepath.Join(dir, "usr", "bin", "comfygate"), 0o755)
	copyFile(t, filepath.Join(repo, "deploy", "comfygate.service"), filepath.Join(dir, "etc", "systemd", "system", "comfygate.service"), 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "usr", "lib", "systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", "/usr/lib/systemd/system", filepath.Join(dir, "usr", "lib", "systemd")).CombinedOutput(); err != nil {
		t.Fatalf("copying the host's units: %v\n%s", err, out)
	}
	if sysusers, err := exec.LookPath("systemd-sysusers"); err == nil {
		if out, err := exec.Command(sysusers, "--root="+dir, filepath.Join(repo, "deploy", "comfygate.sysusers")).CombinedOutput(); err != nil {
			t.Errorf("systemd-sysusers: %v\n%s", err, out)
		} else if passwd, _ := os.ReadFile(filepath.Join(dir, "etc", "passwd")); !strings.Contains(string(passwd), "comfygate:x:") {
			t.Errorf("systemd-sysusers made no comfygate user: %s", out)
		}
	}
	return dir
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
}

// parseUnit reads a systemd unit file into "Section.Key" → values, failing
// on lines that are neither comments, section headers nor assignments.
func parseUnit(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unit := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, "\\") {
				t.Fatalf("%s:%d: not an assignment in a section: %q", path, n, line)
			}
			unit[section+"."+strings.TrimSpace(key)] = append(unit[section+"."+strings.TrimSpace(key)], strings.TrimSpace(value))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return unit
}
