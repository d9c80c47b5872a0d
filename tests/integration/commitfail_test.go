package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestDeleteWhoseCommitFailsKeepsBytes is issue 37's reproduction: a
// deferred constraint that raises at COMMIT makes the delete of an asset
// fail after every statement of it succeeded. The asset must stay readable
// with its exact bytes (before, the bytes were removed inside the
// transaction, ahead of the COMMIT, and the surviving asset answered 404
// blob_not_found), and so must an expired asset whose retention sweep
// fails the same way. Once the constraint is gone, the delete and the
// sweep take the bytes with them.
func TestDeleteWhoseCommitFailsKeepsBytes(t *testing.T) {
	t.Parallel()
	for _, layout := range []string{"file_system", "s3"} {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			dsn := pgtest.DSN(t)
			blobs := "blobs file_system ./data/blobs"
			dir := t.TempDir()
			if layout == "s3" {
				bucket := s3test.Bucket(t)
				s3Buckets.Store(dir, bucket)
				t.Cleanup(func() { s3Buckets.Delete(dir) })
				blobs = bucket.Caddyfile()
			}
			cfg := siteConfig(fmt.Sprintf("storage postgres %q\n\t\t%s", dsn, blobs), "comfy_auth none")
			g := gateway.Start(t, cfg, gateway.Options{Dir: dir})
			db, err := pgx.Connect(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close(context.Background())

			deleted, expired := randomBytes(5000), randomBytes(7000)
			ids := map[string]string{}
			for _, data := range [][]byte{deleted, expired} {
				r := upload(t, g, nil, uploadParts(data, fmt.Sprintf("a%d.png", len(data)))...)
				if r.Status != http.StatusCreated {
					t.Fatalf("upload: %d %s", r.Status, r.Body)
				}
				ids[string(data)] = r.JSON(t)["id"].(string)
			}
			readable := func(what string, data []byte) {
				t.Helper()
				id := ids[string(data)]
				if r := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id, nil, nil); r.Status != http.StatusOK {
					t.Fatalf("%s: metadata %d %s", what, r.Status, r.Body)
				}
				r := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id+"/content", nil, nil)
				if r.Status != http.StatusOK || !bytes.Equal(r.Body, data) {
					t.Fatalf("%s: content %d (%d bytes, want %d): %.200s", what, r.Status, len(r.Body), len(data), r.Body)
				}
			}

			sqlExec(t, db, `CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS
				$$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$`)
			sqlExec(t, db, `CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER DELETE ON assets
				DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()`)

			r := do(t, http.MethodDelete, g.URL+"/api/v2/assets/"+ids[string(deleted)], nil, nil)
			if code, _ := r.JSON(t)["error"].(map[string]any)["code"].(string); r.Status != http.StatusInternalServerError || code != "upstream_error" {
				t.Fatalf("DELETE whose commit fails: %d %s, want 500 upstream_error", r.Status, r.Body)
			}
			readable("after the failed delete", deleted)

			// The retention sweep, on an asset made expired, fails the same
			// way; the gateway sweeps when it starts.
			sqlExec(t, db, `UPDATE assets SET expires_at = now() - interval '1 hour' WHERE id = $1`, ids[string(expired)])
			g.Stop()
			g = gateway.Start(t, cfg, gateway.Options{Dir: dir, Port: g.Port})
			waitLog(t, g, "sweeping expired assets")
			// An expired asset reads as not found; un-expired again, it
			// must read whole.
			sqlExec(t, db, `UPDATE assets SET expires_at = NULL WHERE id = $1`, ids[string(expired)])
			readable("after the failed retention sweep", expired)
			readable("after the failed retention sweep", deleted)

			sqlExec(t, db, `DROP TRIGGER refuse_at_commit ON assets`)
			if r := do(t, http.MethodDelete, g.URL+"/api/v2/assets/"+ids[string(deleted)], nil, nil); r.Status != http.StatusNoContent {
				t.Fatalf("DELETE: %d %s", r.Status, r.Body)
			}
			sqlExec(t, db, `UPDATE assets SET expires_at = now() - interval '1 hour' WHERE id = $1`, ids[string(expired)])
			g.Stop()
			g = gateway.Start(t, cfg, gateway.Options{Dir: dir, Port: g.Port})
			deadline := time.Now().Add(20 * time.Second)
			for len(blobFiles(t, g, "objects")) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("bytes left after the delete and the sweep: %v", blobFiles(t, g, "objects"))
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

func sqlExec(t *testing.T, db *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", strings.Fields(sql)[0], err)
	}
}

// waitLog waits until the gateway's log has a line containing s.
func waitLog(t *testing.T, g *gateway.Gateway, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(g.Logs(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line %q in:\n%s", s, g.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
