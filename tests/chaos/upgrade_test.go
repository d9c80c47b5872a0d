package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// newestMigration is the migration the rolling-upgrade scenario crosses:
// the newest file of storage/postgres/migrations (0010_blob_objects.sql
// when this was written). The previous release is the commit before the
// one that added it.
func newestMigration(t *testing.T, root string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "storage/postgres/migrations/*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations under %s: %v", root, err)
	}
	sort.Strings(files)
	rel, err := filepath.Rel(root, files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// previousRelease builds the gateway at the commit before newestMigration
// landed (git archive of the repository's own history, built once per
// commit and kept in the user's cache directory) and returns its path, commit
// and the migration. It skips the test when the repository has no history.
func previousRelease(t *testing.T) (bin, commit, newest string) {
	t.Helper()
	root := gateway.RepoRoot(t)
	newest = newestMigration(t, root)
	// --follow: a migration renumbered when its branch merged keeps the
	// commit that first added it, whose parent is the release before it.
	out, err := exec.Command("git", "-C", root, "log", "--follow", "--format=%H", "--diff-filter=A", "--", newest).Output()
	added := strings.Fields(string(out))
	if err != nil || len(added) == 0 {
		t.Skipf("no git history for %s in %s (%v): the rolling upgrade needs the repository's history to build the previous release", newest, root, err)
	}
	out, err = exec.Command("git", "-C", root, "rev-parse", added[len(added)-1]+"^").Output()
	if err != nil {
		t.Skipf("the commit that added %s has no parent in this clone (%v): a shallow clone?", newest, err)
	}
	commit = strings.TrimSpace(string(out))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin = filepath.Join(cache, "comfygate", "gateway-"+commit, "comfygate")
	if _, err := os.Stat(bin); err == nil {
		return bin, commit, newest
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", root, commit, src))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin+".tmp", "./cmd/comfygate")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release (%s): %v\n%s", commit, err, out)
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	return bin, commit, newest
}

// TestRollingUpgrade: two gateways of the previous release (the commit
// before the newest migration) serve a database migrated by them; under the
// workload they are replaced one at a time (SIGTERM, then the current
// gateway started on the same port): the first current gateway applies
// the new migration while the other previous-release gateway keeps
// serving, and for a while the two versions run side by side on the
// migrated schema. The checker then wants nothing lost or duplicated.
func TestRollingUpgrade(t *testing.T) {
	sideBySide(t)
	old, commit, newest := previousRelease(t)
	current := gateway.Binary(t)
	pause := pick(3*time.Second, 15*time.Second)
	var observed []string
	var crosses int
	sc := scenario("rolling upgrade across a migration",
		fmt.Sprintf("two gateways of the previous release (%.7s, before %s) replaced one at a time under load "+
			"(SIGTERM, the current gateway started on its port, which migrates), %s of both versions side by side",
			commit, filepath.Base(newest), pause), 2*pause,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			for _, i := range []int{1, 0} {
				s.Gateways[i].Stop()
				s.Gateways[i] = gateway.Start(t, s.caddyfile, gateway.Options{Port: s.Gateways[i].Port, Binary: current})
				if i == 0 {
					break
				}
				// Side by side: bytes uploaded through one version read
				// back through the other, both ways, every 500 ms.
				end := time.After(pause)
			side:
				for {
					for _, d := range []struct{ from, to, what string }{
						{s.Gateways[1].URL, s.Gateways[0].URL, crossNewToOld},
						{s.Gateways[0].URL, s.Gateways[1].URL, crossOldToNew},
					} {
						crosses++
						if err := crossRead(d.from, d.to); err != nil {
							observed = append(observed, d.what+": "+err.Error())
						}
					}
					select {
					case <-ctx.Done():
						break side
					case <-end:
						break side
					case <-time.After(500 * time.Millisecond):
					}
				}
			}
			return hold(ctx)
		})
	sc.Gateways = 2
	sc.Observed = func() []string { return observed }
	// Open: the previous release reads a blob at its content address only,
	// and the current one leaves an upload where it was streamed (0010's
	// object_key), so until the last previous-release gateway is replaced
	// it answers 404 blob_not_found for assets uploaded through a current
	// one. Nothing is lost (the current gateways read them), but it is an
	// outage of those assets on the old gateways during the roll.
	sc.Open = append(sc.Open, crossNewToOld)
	sc.OpenLimit = 1000
	Run(t, sc, StackOptions{Binary: old})
	t.Logf("cross-version reads: %d, failed: %d", crosses, len(observed))
}

const (
	crossNewToOld = "uploaded through a current gateway, unreadable through a previous-release one"
	crossOldToNew = "uploaded through a previous-release gateway, unreadable through a current one"
)

// crossRead uploads random bytes (without a declared hash, as a browser
// does) through one gateway and reads them back through another.
func crossRead(from, to string) error {
	data := make([]byte, 64<<10)
	rand.Read(data)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("content_type", "application/octet-stream")
	_ = mw.WriteField("file_path", "cross.bin")
	part, _ := mw.CreateFormFile("file", "cross.bin")
	part.Write(data)
	mw.Close()
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Post(from+"/api/v2/assets", mw.FormDataContentType(), &body)
	if err != nil {
		return err
	}
	var created struct {
		ID string `json:"id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || err != nil {
		return fmt.Errorf("upload: %d %v", resp.StatusCode, err)
	}
	resp, err = client.Get(to + "/api/v2/assets/" + created.ID + "/content")
	if err != nil {
		return err
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
		return fmt.Errorf("asset %s: %d with %d bytes, want 200 with the %d sent: %.200s", created.ID, resp.StatusCode, len(got), len(data), got)
	}
	return nil
}
